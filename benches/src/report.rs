//! Reports of a benchmark run: a terminal table, a markdown table, JSON, and one SVG
//! with two charts (write amplification per backend, physical bytes against turns).
//!
//! Rows are ordered by workload (fewest sessions first), backend (`memory`, `redb`,
//! `sqlite`, `postgres`, `redis`, then others by name), turns, mode and policy, so the
//! same measurements always give the same report.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{bail, Context as _};
use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;

use crate::{Measurement, Mode, Policy};

/// Title of the write-amplification chart; the chosen workload and T follow it.
pub const WA_CHART_TITLE: &str = "Write amplification by backend";
/// Title of the physical-bytes chart.
pub const BYTES_CHART_TITLE: &str = "Physical bytes written vs turns (W1, one session)";

/// Backends in report order; unknown backends follow, by name.
const BACKEND_ORDER: [&str; 5] = ["memory", "redb", "sqlite", "postgres", "redis"];
const NONE: &str = "–";
const EMPTY: &str = "no measurements";

// ---------------------------------------------------------------------------
// Formatting helpers

/// Bytes in decimal units with three significant digits: `512 B`, `17.7 kB`, `1.77 MB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 999.5 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    format!("{} {}", sig3(v), UNITS[unit])
}

/// A rate with a k/M/G suffix and three significant digits: `950`, `81.2k`, `812k`,
/// `1.23M`; `–` when not a finite, non-negative number.
pub fn human_rate(rate: f64) -> String {
    const SUFFIXES: [&str; 5] = ["", "k", "M", "G", "T"];
    if !rate.is_finite() || rate < 0.0 {
        return NONE.to_owned();
    }
    if rate < 999.5 {
        return if rate < 10.0 {
            format!("{rate:.1}")
        } else {
            format!("{rate:.0}")
        };
    }
    let mut v = rate;
    let mut unit = 0;
    while v >= 999.5 && unit + 1 < SUFFIXES.len() {
        v /= 1000.0;
        unit += 1;
    }
    format!("{}{}", sig3(v), SUFFIXES[unit])
}

/// Three significant digits for `0 <= v < 999.5`.
fn sig3(v: f64) -> String {
    if (v * 100.0).round() < 1000.0 {
        format!("{v:.2}")
    } else if (v * 10.0).round() < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A write-amplification factor: `3.41×`, `15.7×`, `1097×`.
fn fmt_factor(x: f64) -> String {
    if x >= 99.95 {
        format!("{x:.0}×")
    } else if x >= 9.995 {
        format!("{x:.1}×")
    } else {
        format!("{x:.2}×")
    }
}

/// Microseconds, switching to ms or s as the value grows.
fn fmt_us(us: f64) -> String {
    if us < 9.95 {
        format!("{us:.1} µs")
    } else if us < 999.5 {
        format!("{us:.0} µs")
    } else if us < 999_500.0 {
        format!("{} ms", sig3(us / 1000.0))
    } else {
        format!("{} s", sig3(us / 1_000_000.0))
    }
}

fn fmt_ms(ms: f64) -> String {
    if ms == 0.0 {
        "0 ms".to_owned()
    } else if ms < 9.95 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// An integer with thousands separators: `1,234,567`.
fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------------------
// Ordering

fn backend_rank(backend: &str) -> usize {
    BACKEND_ORDER
        .iter()
        .position(|b| *b == backend)
        .unwrap_or(BACKEND_ORDER.len())
}

fn mode_rank(mode: Mode) -> u8 {
    match mode {
        Mode::Boundary => 0,
        Mode::PerDelta => 1,
    }
}

fn policy_key(policy: Policy) -> (u8, u64) {
    match policy {
        Policy::EveryBoundary => (0, 0),
        Policy::Terminal { window_ms } => (1, window_ms),
    }
}

/// `(mode, policy)` in report order.
type SeriesKey = (u8, (u8, u64));

fn series_key(m: &Measurement) -> SeriesKey {
    (mode_rank(m.mode), policy_key(m.policy))
}

/// `boundary, terminal/10ms`: what distinguishes runs of one backend on one workload.
fn series_label(m: &Measurement) -> String {
    format!("{}, {}", m.mode.as_str(), m.policy.label())
}

fn backend_key(backend: &str) -> (usize, &str) {
    (backend_rank(backend), backend)
}

/// Measurements sorted by workload, backend, T, mode, policy.
fn sorted(ms: &[Measurement]) -> Vec<&Measurement> {
    let mut out: Vec<&Measurement> = ms.iter().collect();
    out.sort_by(|a, b| {
        (
            a.sessions,
            &a.workload,
            backend_key(&a.backend),
            a.turns,
            series_key(a),
        )
            .cmp(&(
                b.sessions,
                &b.workload,
                backend_key(&b.backend),
                b.turns,
                series_key(b),
            ))
    });
    out
}

// ---------------------------------------------------------------------------
// Tables

const HEADERS: [&str; 15] = [
    "backend",
    "mode",
    "policy",
    "workload",
    "T",
    "logical",
    "handed",
    "rows",
    "commits",
    "fsyncs",
    "physical",
    "WA",
    "deltas/s",
    "latency p50/p99",
    "publish delay p50/p99",
];
/// Columns before this index are text (left-aligned), the rest numbers.
const FIRST_NUMERIC: usize = 4;

fn cells(m: &Measurement) -> Vec<String> {
    vec![
        m.backend.clone(),
        m.mode.as_str().to_owned(),
        m.policy.label(),
        m.workload.clone(),
        m.turns.to_string(),
        human_bytes(m.logical_bytes),
        human_bytes(m.handed_bytes),
        fmt_count(m.rows),
        fmt_count(m.commits),
        m.fsyncs.map_or_else(|| NONE.to_owned(), fmt_count),
        m.physical
            .as_ref()
            .map_or_else(|| NONE.to_owned(), |p| human_bytes(p.bytes)),
        m.amplification()
            .map_or_else(|| NONE.to_owned(), fmt_factor),
        human_rate(m.deltas_per_s()),
        m.latency_us.map_or_else(
            || NONE.to_owned(),
            |p| format!("{} / {}", fmt_us(p.p50), fmt_us(p.p99)),
        ),
        m.publish_delay_ms.map_or_else(
            || NONE.to_owned(),
            |p| format!("{} / {}", fmt_ms(p.p50), fmt_ms(p.p99)),
        ),
    ]
}

/// One line per distinct physical source: `(sources, backends measured that way)`.
fn physical_legend(rows: &[&Measurement]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for m in rows {
        let Some(p) = &m.physical else { continue };
        match out.iter_mut().find(|(s, _)| *s == p.source) {
            Some((_, backends)) => {
                if !backends.contains(&m.backend) {
                    backends.push(m.backend.clone());
                }
            }
            None => out.push((p.source.clone(), vec![m.backend.clone()])),
        }
    }
    out
}

/// The measurements as an aligned terminal table, grouped by workload (a blank line
/// between workloads) then backend, followed by one legend line per way "physical"
/// was measured. Empty input gives `no measurements`.
pub fn table(ms: &[Measurement]) -> String {
    if ms.is_empty() {
        return format!("{EMPTY}\n");
    }
    let rows = sorted(ms);
    let body: Vec<Vec<String>> = rows.iter().map(|m| cells(m)).collect();
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
    for row in &body {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[String]| -> String {
        let mut s = String::new();
        for (i, (c, w)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            if i < FIRST_NUMERIC {
                let _ = write!(s, "{c:<w$}");
            } else {
                let _ = write!(s, "{c:>w$}");
            }
        }
        s.trim_end().to_owned()
    };
    let headers: Vec<String> = HEADERS.iter().map(|h| (*h).to_owned()).collect();
    let mut out = line(&headers);
    out.push('\n');
    let total = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
    out.push_str(&"-".repeat(total));
    out.push('\n');
    for (i, (m, row)) in rows.iter().zip(&body).enumerate() {
        if i > 0 && (rows[i - 1].sessions, &rows[i - 1].workload) != (m.sessions, &m.workload) {
            out.push('\n');
        }
        out.push_str(&line(row));
        out.push('\n');
    }
    out.push('\n');
    out.push_str("WA = physical / logical bytes; – = not measured.\n");
    for (source, backends) in physical_legend(&rows) {
        let _ = writeln!(out, "physical ({}): {source}", backends.join(", "));
    }
    out
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The same table as GitHub markdown, followed by the legend as a list. Empty input
/// gives `_no measurements_`.
pub fn markdown(ms: &[Measurement]) -> String {
    if ms.is_empty() {
        return format!("_{EMPTY}_\n");
    }
    let rows = sorted(ms);
    let mut out = format!("| {} |\n|", HEADERS.join(" | "));
    for i in 0..HEADERS.len() {
        out.push_str(if i < FIRST_NUMERIC { "---|" } else { "---:|" });
    }
    out.push('\n');
    for m in &rows {
        let row: Vec<String> = cells(m).iter().map(|c| md_escape(c)).collect();
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push_str("\nWA = physical / logical bytes; – = not measured.\n\n");
    for (source, backends) in physical_legend(&rows) {
        let _ = writeln!(
            out,
            "- physical ({}): {}",
            md_escape(&backends.join(", ")),
            md_escape(&source)
        );
    }
    out
}

// ---------------------------------------------------------------------------
// JSON

/// A measurement as written to JSON, with its write amplification computed.
#[derive(Serialize)]
struct JsonRow<'a> {
    #[serde(flatten)]
    measurement: &'a Measurement,
    write_amplification: Option<f64>,
}

/// Writes the measurements as a pretty JSON array; each object carries an extra
/// computed `write_amplification` (physical / logical, `null` when unknown).
pub fn write_json(ms: &[Measurement], path: &Path) -> anyhow::Result<()> {
    let rows: Vec<JsonRow<'_>> = ms
        .iter()
        .map(|m| JsonRow {
            measurement: m,
            write_amplification: m.amplification(),
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&rows).context("serializing measurements")?;
    text.push('\n');
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Reads measurements written by [`write_json`]; computed fields are ignored.
pub fn read_json(path: &Path) -> anyhow::Result<Vec<Measurement>> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("parsing {} as a JSON array of measurements", path.display()))
}

// ---------------------------------------------------------------------------
// SVG

const WIDTH: u32 = 1200;
const PANEL_HEIGHT: u32 = 640;
const LEGEND_WIDTH: u32 = 310;
const FONT: &str = "sans-serif";
/// Tableau 10: one colour per mode/policy, the same in both charts.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// What both charts draw: measurements with physical bytes, and the colour (per
/// mode/policy) and marker (per backend) assignment shared by the charts.
struct Chartable<'a> {
    rows: Vec<&'a Measurement>,
    series: Vec<SeriesKey>,
    backends: Vec<String>,
}

impl<'a> Chartable<'a> {
    fn new(ms: &'a [Measurement]) -> Self {
        let rows: Vec<&Measurement> = sorted(ms)
            .into_iter()
            .filter(|m| m.physical.as_ref().is_some_and(|p| p.bytes > 0))
            .collect();
        let series: BTreeSet<SeriesKey> = rows.iter().map(|m| series_key(m)).collect();
        let mut backends: Vec<String> = Vec::new();
        for m in &rows {
            if !backends.contains(&m.backend) {
                backends.push(m.backend.clone());
            }
        }
        Self {
            rows,
            series: series.into_iter().collect(),
            backends,
        }
    }

    fn color(&self, m: &Measurement) -> RGBColor {
        let i = self
            .series
            .iter()
            .position(|k| *k == series_key(m))
            .unwrap_or(0);
        PALETTE[i % PALETTE.len()]
    }

    fn shape(&self, backend: &str) -> usize {
        self.backends.iter().position(|b| b == backend).unwrap_or(0)
    }
}

/// Runs with a usable write-amplification figure.
fn with_wa(m: &Measurement) -> Option<f64> {
    m.amplification().filter(|wa| wa.is_finite() && *wa > 0.0)
}

/// The workload and T the amplification chart shows: the single-session `W1` if it
/// was measured, else the workload with the fewest sessions (then by name); within
/// it, the largest T measured in both modes, else the largest T.
fn pick_wa_run<'m>(rows: &[&'m Measurement]) -> Option<(&'m str, u32, u32)> {
    let candidates: Vec<&Measurement> = rows
        .iter()
        .copied()
        .filter(|m| with_wa(m).is_some())
        .collect();
    let (workload, sessions) = candidates
        .iter()
        .map(|m| {
            let preferred = m.workload == "W1" && m.sessions == 1;
            (!preferred, m.sessions, m.workload.as_str())
        })
        .min()
        .map(|(_, s, w)| (w, s))?;
    let mut modes: BTreeMap<u32, (bool, bool)> = BTreeMap::new();
    for m in &candidates {
        if m.workload == workload && m.sessions == sessions {
            let e = modes.entry(m.turns).or_default();
            match m.mode {
                Mode::Boundary => e.0 = true,
                Mode::PerDelta => e.1 = true,
            }
        }
    }
    let turns = modes
        .iter()
        .rev()
        .find(|(_, (b, p))| *b && *p)
        .or_else(|| modes.iter().next_back())
        .map(|(t, _)| *t)?;
    Some((workload, sessions, turns))
}

/// Powers of ten spanning `[min, max]` with some head room, and tick values on that
/// range (1-2-5 steps when it spans at most two decades).
fn log_axis(min: f64, max: f64, below: f64, above: f64) -> (f64, f64, Vec<f64>) {
    let lo_exp = (min / below).log10().floor() as i32;
    let hi_exp = ((max * above).log10().ceil() as i32).max(lo_exp + 1);
    let mut ticks = Vec::new();
    for e in lo_exp..=hi_exp {
        let d = 10f64.powi(e);
        ticks.push(d);
        if hi_exp - lo_exp <= 2 && e < hi_exp {
            ticks.push(2.0 * d);
            ticks.push(5.0 * d);
        }
    }
    (10f64.powi(lo_exp), 10f64.powi(hi_exp), ticks)
}

/// The x axis of the bar chart: `n` groups, group `i` spanning `[i, i + 1)`, one
/// tick (and label) at each group's centre.
struct GroupAxis(usize);

impl Ranged for GroupAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        limit.0 + (span * value / self.0.max(1) as f64).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            (0..self.0).map(|i| i as f64 + 0.5).collect()
        }
    }

    fn range(&self) -> Range<f64> {
        0.0..self.0 as f64
    }
}

/// Tick labels without trailing zeros: `0.1`, `2`, `1000`.
fn fmt_tick(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A filled marker of one of five shapes (by `shape`) at `at`.
fn draw_marker<DB, CT>(
    area: &DrawingArea<DB, CT>,
    at: CT::From,
    shape: usize,
    color: RGBColor,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    CT: CoordTranslate,
{
    let style = color.filled();
    let e = EmptyElement::at(at);
    match shape % 5 {
        0 => area.draw(&(e + Circle::new((0, 0), 4, style)))?,
        1 => area.draw(&(e + TriangleMarker::new((0, 0), 6, style)))?,
        2 => area.draw(&(e + Rectangle::new([(-4, -4), (4, 4)], style)))?,
        3 => area.draw(&(e + Polygon::new(vec![(0, -6), (6, 0), (0, 6), (-6, 0)], style)))?,
        _ => area.draw(&(e + Cross::new((0, 0), 5, color.stroke_width(2))))?,
    }
    Ok(())
}

/// What a legend entry shows left of its label.
#[derive(Clone, Copy)]
enum Swatch {
    /// A filled square (a bar's colour).
    Bar(RGBColor),
    /// A line with the series' marker.
    Line(RGBColor, usize),
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    heading: &str,
    entries: &[(Swatch, String)],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let (_, h) = area.dim_in_pixel();
    let step = if entries.is_empty() {
        22
    } else {
        (h.saturating_sub(80) / entries.len() as u32).clamp(12, 22) as i32
    };
    let left = Pos::new(HPos::Left, VPos::Center);
    area.draw(&Text::new(
        heading.to_owned(),
        (10, 40),
        TextStyle::from((FONT, 15).into_font().style(FontStyle::Bold)).pos(left),
    ))?;
    for (i, (swatch, label)) in entries.iter().enumerate() {
        let y = 66 + i as i32 * step;
        match *swatch {
            Swatch::Bar(color) => {
                area.draw(&Rectangle::new([(15, y - 7), (29, y + 7)], color.filled()))?;
            }
            Swatch::Line(color, shape) => {
                area.draw(&PathElement::new(
                    vec![(10, y), (34, y)],
                    color.stroke_width(2),
                ))?;
                draw_marker(area, (22, y), shape, color)?;
            }
        }
        area.draw(&Text::new(
            label.clone(),
            (44, y),
            TextStyle::from((FONT, 14).into_font()).pos(left),
        ))?;
    }
    Ok(())
}

fn draw_note<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, note: &str) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let (w, h) = area.dim_in_pixel();
    area.draw(&Text::new(
        note.to_owned(),
        ((w / 2) as i32, (h / 2) as i32),
        TextStyle::from((FONT, 16).into_font())
            .color(&RGBColor(90, 90, 90))
            .pos(Pos::new(HPos::Center, VPos::Center)),
    ))?;
    Ok(())
}

/// Chart (a): bars of write amplification, one group per backend, one bar per
/// mode/policy, for the run chosen by [`pick_wa_run`].
fn draw_wa_chart<DB: DrawingBackend>(
    panel: &DrawingArea<DB, Shift>,
    data: &Chartable<'_>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let Some((workload, sessions, turns)) = pick_wa_run(&data.rows) else {
        let body = panel.titled(WA_CHART_TITLE, (FONT, 22))?;
        return draw_note(&body, "no run with both physical and logical bytes");
    };
    let title = format!("{WA_CHART_TITLE} — {workload}, T = {turns} (physical / logical bytes)");
    let body = panel.titled(&title, (FONT, 22))?;
    let (plot, legend) = body.split_horizontally(WIDTH - LEGEND_WIDTH);

    let runs: Vec<(&Measurement, f64)> = data
        .rows
        .iter()
        .filter(|m| m.workload == workload && m.sessions == sessions && m.turns == turns)
        .filter_map(|m| with_wa(m).map(|wa| (*m, wa)))
        .collect();
    let mut groups: Vec<&str> = Vec::new();
    let mut slots: Vec<SeriesKey> = Vec::new();
    for (m, _) in &runs {
        if !groups.contains(&m.backend.as_str()) {
            groups.push(&m.backend);
        }
        if !slots.contains(&series_key(m)) {
            slots.push(series_key(m));
        }
    }
    slots.sort_unstable();
    let min = runs.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let max = runs.iter().map(|r| r.1).fold(0.0, f64::max);
    let (lo, hi, ticks) = log_axis(min, max, 1.5, 2.5);

    let mut chart = ChartBuilder::on(&plot)
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            GroupAxis(groups.len()),
            (lo..hi).log_scale().with_key_points(ticks),
        )?;
    let x_fmt = |x: &f64| {
        groups
            .get(x.floor().max(0.0) as usize)
            .map_or_else(String::new, |g| (*g).to_owned())
    };
    let y_fmt = |y: &f64| format!("{}×", fmt_tick(*y));
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("backend")
        .y_desc("write amplification (log scale)")
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()?;

    let slot_width = 0.8 / slots.len() as f64;
    let mut seen = BTreeSet::new();
    let mut entries: Vec<(Swatch, String)> = Vec::new();
    for (m, wa) in &runs {
        let g = groups.iter().position(|g| *g == m.backend).unwrap_or(0);
        let s = slots.iter().position(|k| *k == series_key(m)).unwrap_or(0);
        if !seen.insert((g, s)) {
            continue; // a repeated run of the same configuration: the first one is shown
        }
        let color = data.color(m);
        let x0 = g as f64 + 0.1 + s as f64 * slot_width;
        let x1 = x0 + slot_width * 0.92;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x0, lo), (x1, *wa)],
            color.filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            fmt_factor(*wa),
            (f64::midpoint(x0, x1), *wa),
            TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom)),
        )))?;
        let label = series_label(m);
        if !entries.iter().any(|(_, l)| *l == label) {
            entries.push((Swatch::Bar(color), label));
        }
    }
    draw_legend(&legend, "mode, policy", &entries)
}

/// Backend (in report order), then mode and policy.
type LineKey<'a> = ((usize, &'a str), SeriesKey);

/// One line of the bytes chart: its first run (for colour, marker and label) and its
/// `(T, physical bytes)` points by increasing T.
struct Line<'a> {
    first: &'a Measurement,
    points: Vec<(f64, f64)>,
}

/// Chart (b): physical bytes against T, log–log, one line per backend × mode/policy,
/// for single-session W1 runs.
fn draw_bytes_chart<DB: DrawingBackend>(
    panel: &DrawingArea<DB, Shift>,
    data: &Chartable<'_>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let body = panel.titled(BYTES_CHART_TITLE, (FONT, 22))?;
    let mut lines: BTreeMap<LineKey<'_>, Line<'_>> = BTreeMap::new();
    for m in &data.rows {
        let Some(p) = &m.physical else { continue };
        if m.workload != "W1" || m.sessions != 1 || m.turns == 0 {
            continue;
        }
        let key = (backend_key(&m.backend), series_key(m));
        let line = lines.entry(key).or_insert_with(|| Line {
            first: m,
            points: Vec::new(),
        });
        // Rows are sorted by T; a repeated T keeps its first run.
        if line
            .points
            .last()
            .is_none_or(|(t, _)| *t < f64::from(m.turns))
        {
            line.points.push((f64::from(m.turns), p.bytes as f64));
        }
    }
    if lines.is_empty() {
        return draw_note(&body, "no single-session W1 run with physical bytes");
    }
    let (plot, legend) = body.split_horizontally(WIDTH - LEGEND_WIDTH);
    let all = || lines.values().flat_map(|l| &l.points);
    let turns: BTreeSet<u32> = all().map(|(t, _)| *t as u32).collect();
    let t_min = all().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let t_max = all().map(|p| p.0).fold(0.0, f64::max);
    let b_min = all().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let b_max = all().map(|p| p.1).fold(0.0, f64::max);
    let (lo, hi, ticks) = log_axis(b_min, b_max, 1.5, 1.5);

    let mut chart = ChartBuilder::on(&plot)
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(
            (t_min / 1.6..t_max * 1.6)
                .log_scale()
                .with_key_points(turns.iter().map(|t| f64::from(*t)).collect()),
            (lo..hi).log_scale().with_key_points(ticks),
        )?;
    let x_fmt = |x: &f64| fmt_tick(*x);
    let y_fmt = |y: &f64| {
        let label = human_bytes(y.round() as u64);
        match label.split_once(' ') {
            Some((n, unit)) if n.contains('.') => {
                format!("{} {unit}", n.trim_end_matches('0').trim_end_matches('.'))
            }
            _ => label,
        }
    };
    chart
        .configure_mesh()
        .x_desc("T (turns, log scale)")
        .y_desc("physical bytes written (log scale)")
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()?;

    let mut entries: Vec<(Swatch, String)> = Vec::new();
    for Line { first: m, points } in lines.values() {
        let color = data.color(m);
        let shape = data.shape(&m.backend);
        chart.draw_series(LineSeries::new(
            points.iter().copied(),
            color.stroke_width(2),
        ))?;
        for p in points {
            draw_marker(chart.plotting_area(), *p, shape, color)?;
        }
        entries.push((
            Swatch::Line(color, shape),
            format!("{} · {}", m.backend, series_label(m)),
        ));
    }
    draw_legend(&legend, "backend · mode, policy", &entries)
}

/// The two charts as one SVG document: write amplification per backend and
/// mode/policy for one workload (a), and physical bytes against T for single-session
/// W1 runs (b). Measurements without physical bytes are left out; it is an error when
/// none has them.
pub fn svg(ms: &[Measurement]) -> anyhow::Result<String> {
    if ms.is_empty() {
        bail!("no measurements to chart");
    }
    let data = Chartable::new(ms);
    if data.rows.is_empty() {
        bail!(
            "none of the {} measurements has physical bytes (the memory backend writes none); nothing to chart",
            ms.len()
        );
    }
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, 2 * PANEL_HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(PANEL_HEIGHT);
        draw_wa_chart(&top.margin(10, 10, 10, 10), &data)?;
        draw_bytes_chart(&bottom.margin(10, 10, 10, 10), &data)?;
        root.present()?;
    }
    Ok(out)
}

/// Writes [`svg`] to `path`.
pub fn write_svg(ms: &[Measurement], path: &Path) -> anyhow::Result<()> {
    let doc = svg(ms)?;
    fs::write(path, doc).with_context(|| format!("writing {}", path.display()))
}
