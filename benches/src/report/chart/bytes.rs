//! Chart (b): bytes written against T, log–log, one line per backend × mode/policy,
//! for single-session W1 runs.

use std::collections::{BTreeMap, BTreeSet};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::elements::{
    chart_builder, draw_legend, draw_marker, draw_mesh, draw_note, extent, fmt_tick, log_axis,
    Swatch,
};
use super::{Chartable, FONT, LEGEND_WIDTH, WIDTH};
use crate::report::format::human_bytes;
use crate::report::{backend_key, series_key, series_label, SeriesKey, BYTES_CHART_TITLE};
use crate::Measurement;

/// Backend (in report order), then mode and policy.
type LineKey<'a> = ((usize, &'a str), SeriesKey);

/// One line of the bytes chart: its first run (for colour, marker and label) and its
/// `(T, physical bytes)` points by increasing T.
struct Line<'a> {
    first: &'a Measurement,
    points: Vec<(f64, f64)>,
}

/// Chart (b): bytes written against T, log–log, one line per backend × mode/policy,
/// for single-session W1 runs.
pub(super) fn draw_bytes_chart<DB: DrawingBackend>(
    panel: &DrawingArea<DB, Shift>,
    data: &Chartable<'_>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let title = format!("{BYTES_CHART_TITLE} — {}", data.basis.label());
    let body = panel.titled(&title, (FONT, 22))?;
    let mut lines: BTreeMap<LineKey<'_>, Line<'_>> = BTreeMap::new();
    for m in &data.rows {
        let Some(bytes) = data.basis.bytes(m) else {
            continue;
        };
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
            line.points.push((f64::from(m.turns), bytes as f64));
        }
    }
    if lines.is_empty() {
        return draw_note(&body, "no single-session W1 run with bytes written");
    }
    let (plot, legend) = body.split_horizontally(WIDTH - LEGEND_WIDTH);
    let all = || lines.values().flat_map(|l| &l.points);
    let turns: BTreeSet<u32> = all().map(|(t, _)| *t as u32).collect();
    let (t_min, t_max) = extent(all().map(|p| p.0));
    let (b_min, b_max) = extent(all().map(|p| p.1));
    let (lo, hi, ticks) = log_axis(b_min, b_max, 1.5, 1.5);

    let mut chart = chart_builder(&plot, 80).build_cartesian_2d(
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
    draw_mesh(
        &mut chart.configure_mesh(),
        ("T (turns, log scale)", "bytes written (log scale)"),
        &x_fmt,
        &y_fmt,
    )?;

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
