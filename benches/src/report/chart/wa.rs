//! Chart (a): write amplification per backend, one bar per mode/policy, for one
//! workload and T.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::elements::{
    chart_builder, draw_legend, draw_mesh, draw_note, extent, fmt_tick, log_axis, Swatch,
};
use super::{Basis, Chartable, FONT, LEGEND_WIDTH, WIDTH};
use crate::report::format::fmt_factor;
use crate::report::{series_key, series_label, SeriesKey, WA_CHART_TITLE};
use crate::{Measurement, Mode};

/// A usable write-amplification figure of `m` on `basis`.
fn with_wa(basis: &Basis, m: &Measurement) -> Option<f64> {
    basis
        .amplification(m)
        .filter(|wa| wa.is_finite() && *wa > 0.0)
}

/// The workload and T the amplification chart shows: the single-session `W1` if it
/// was measured, else the workload with the fewest sessions (then by name); within
/// it, the largest T measured in both modes, else the largest T.
fn pick_wa_run<'m>(basis: &Basis, rows: &[&'m Measurement]) -> Option<(&'m str, u32, u32)> {
    let candidates: Vec<&Measurement> = rows
        .iter()
        .copied()
        .filter(|m| with_wa(basis, m).is_some())
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

/// Chart (a): bars of write amplification, one group per backend, one bar per
/// mode/policy, for the run chosen by [`pick_wa_run`].
pub(super) fn draw_wa_chart<DB: DrawingBackend>(
    panel: &DrawingArea<DB, Shift>,
    data: &Chartable<'_>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let Some((workload, sessions, turns)) = pick_wa_run(&data.basis, &data.rows) else {
        let body = panel.titled(WA_CHART_TITLE, (FONT, 22))?;
        return draw_note(&body, "no run with both physical and logical bytes");
    };
    let title = format!(
        "{WA_CHART_TITLE} — {workload}, T = {turns} ({} / logical bytes)",
        data.basis.label()
    );
    let body = panel.titled(&title, (FONT, 22))?;
    let (plot, legend) = body.split_horizontally(WIDTH - LEGEND_WIDTH);

    let runs: Vec<(&Measurement, f64)> = data
        .rows
        .iter()
        .filter(|m| m.workload == workload && m.sessions == sessions && m.turns == turns)
        .filter_map(|m| with_wa(&data.basis, m).map(|wa| (*m, wa)))
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
    let (min, max) = extent(runs.iter().map(|r| r.1));
    let (lo, hi, ticks) = log_axis(min, max, 1.5, 2.5);

    let mut chart = chart_builder(&plot, 70).build_cartesian_2d(
        GroupAxis(groups.len()),
        (lo..hi).log_scale().with_key_points(ticks),
    )?;
    let x_fmt = |x: &f64| {
        groups
            .get(x.floor().max(0.0) as usize)
            .map_or_else(String::new, |g| (*g).to_owned())
    };
    let y_fmt = |y: &f64| format!("{}×", fmt_tick(*y));
    draw_mesh(
        chart.configure_mesh().disable_x_mesh(),
        ("backend", "write amplification (log scale)"),
        &x_fmt,
        &y_fmt,
    )?;

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
