//! Chart (c): device bytes / logical bytes against T, log–log, for forge-store's
//! default path on each backend and for the peers (the systems users run instead,
//! measured by `scripts/peers/`), one session; W1 solid, W2 dashed.

use std::collections::{BTreeMap, BTreeSet};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::elements::{
    chart_builder, draw_legend, draw_marker, draw_mesh, draw_note, extent, fmt_tick, log_axis,
    Swatch,
};
use super::{Basis, Chartable, FONT, PALETTE, WIDTH};
use crate::report::{backend_key, PeerMeasurement, PEERS_CHART_TITLE};

/// The legend's width: the peers' names are long.
const LEGEND_WIDTH: u32 = 430;
/// The workloads the chart draws, and whether each is dashed.
const WORKLOADS: [(&str, bool); 2] = [("W1", false), ("W2", true)];

/// One line: a system on one workload, `(T, device WA)` by increasing T.
#[derive(Debug, PartialEq)]
struct Line {
    system: usize,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// The lines of chart (c) and the names of their systems (forge-store's backends
/// first, in report order, then the peers as they come), all on `filesystem`.
fn lines(
    data: &Chartable<'_>,
    peers: &[PeerMeasurement],
    filesystem: &str,
) -> (Vec<String>, Vec<Line>) {
    let mut systems: Vec<String> = Vec::new();
    let mut by_key: BTreeMap<(usize, bool), BTreeMap<u32, f64>> = BTreeMap::new();
    let mut add = |systems: &mut Vec<String>, name: String, workload: &str, turns, wa| {
        let Some(&(_, dashed)) = WORKLOADS.iter().find(|(w, _)| *w == workload) else {
            return;
        };
        let system = systems.iter().position(|s| *s == name).unwrap_or_else(|| {
            systems.push(name);
            systems.len() - 1
        });
        // A repeated T keeps its first run.
        by_key
            .entry((system, dashed))
            .or_default()
            .entry(turns)
            .or_insert(wa);
    };
    let mut ours: Vec<_> = data
        .rows
        .iter()
        .filter(|m| {
            m.is_default() && m.sessions == 1 && m.filesystem.as_deref() == Some(filesystem)
        })
        .collect();
    ours.sort_by_key(|m| backend_key(&m.backend));
    for m in ours {
        if let (Some(wa), true) = (m.device_amplification(), m.turns > 0) {
            let name = format!("forge-store, {} ★", m.backend);
            add(&mut systems, name, &m.workload, m.turns, wa);
        }
    }
    for p in peers
        .iter()
        .filter(|p| p.sessions == 1 && p.filesystem == filesystem)
    {
        add(
            &mut systems,
            p.system.clone(),
            &p.workload,
            p.turns,
            p.device_amplification(),
        );
    }
    let lines = by_key
        .into_iter()
        .map(|((system, dashed), points)| Line {
            system,
            dashed,
            points: points
                .into_iter()
                .map(|(t, wa)| (f64::from(t), wa))
                .collect(),
        })
        .collect();
    (systems, lines)
}

/// Chart (c), on the device's filesystem of the run (or the peers' first, when the run
/// measured engine counters only: then only the peers are drawn).
pub(super) fn draw_peers_chart<DB: DrawingBackend>(
    panel: &DrawingArea<DB, Shift>,
    data: &Chartable<'_>,
    peers: &[PeerMeasurement],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let filesystem = match &data.basis {
        Basis::Device(fs) => fs.clone(),
        Basis::Engine => peers
            .iter()
            .map(|p| p.filesystem.clone())
            .min()
            .unwrap_or_default(),
    };
    let title = format!("{PEERS_CHART_TITLE} — one session, {filesystem}");
    let body = panel.titled(&title, (FONT, 20))?;
    let (systems, lines) = lines(data, peers, &filesystem);
    if lines.is_empty() {
        return draw_note(
            &body,
            "no single-session W1 or W2 run measured at the device",
        );
    }
    let (plot, legend) = body.split_horizontally(WIDTH - LEGEND_WIDTH);
    let all = || lines.iter().flat_map(|l| &l.points);
    let turns: BTreeSet<u32> = all().map(|(t, _)| *t as u32).collect();
    let (t_min, t_max) = extent(all().map(|p| p.0));
    let (w_min, w_max) = extent(all().map(|p| p.1));
    let (lo, hi, ticks) = log_axis(w_min, w_max, 1.3, 1.3);
    let mut chart = chart_builder(&plot, 60).build_cartesian_2d(
        (t_min / 1.6..t_max * 1.6)
            .log_scale()
            .with_key_points(turns.iter().map(|t| f64::from(*t)).collect()),
        (lo..hi).log_scale().with_key_points(ticks),
    )?;
    let x_fmt = |x: &f64| fmt_tick(*x);
    let y_fmt = |y: &f64| format!("{}×", fmt_tick(*y));
    draw_mesh(
        &mut chart.configure_mesh(),
        (
            "T (turns, log scale)",
            "device bytes / logical bytes (log scale)",
        ),
        &x_fmt,
        &y_fmt,
    )?;
    for line in &lines {
        let color = PALETTE[line.system % PALETTE.len()];
        let style = color.stroke_width(2);
        if line.dashed {
            chart.draw_series(DashedLineSeries::new(
                line.points.iter().copied(),
                8,
                6,
                style,
            ))?;
        } else {
            chart.draw_series(LineSeries::new(line.points.iter().copied(), style))?;
        }
        for p in &line.points {
            draw_marker(chart.plotting_area(), *p, line.system, color)?;
        }
    }
    let entries: Vec<(Swatch, String)> = systems
        .iter()
        .enumerate()
        .map(|(i, s)| (Swatch::Line(PALETTE[i % PALETTE.len()], i), s.clone()))
        .collect();
    draw_legend(&legend, "system (W1 solid, W2 dashed)", &entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Measurement, Mode, Policy, DEFAULT_WINDOW_MS};

    fn run(backend: &str, mode: Mode, options: &str, turns: u32, fs: &str, wa: u64) -> Measurement {
        let logical = 1_000 * u64::from(turns);
        Measurement {
            backend: backend.to_owned(),
            mode,
            policy: Policy::Terminal {
                window_ms: DEFAULT_WINDOW_MS,
            },
            workload: "W1".to_owned(),
            sessions: 1,
            turns,
            logical_bytes: logical,
            handed_bytes: logical,
            rows: 1,
            commits: 1,
            fsyncs: None,
            physical: Some(crate::Physical {
                bytes: logical,
                source: "test".to_owned(),
            }),
            process_write_bytes: None,
            deltas: 1,
            elapsed_s: 1.0,
            latency_us: None,
            publish_delay_ms: None,
            options: options.to_owned(),
            filesystem: Some(fs.to_owned()),
            device_bytes: Some(logical * wa),
        }
    }

    fn peer(system: &str, workload: &str, turns: u32, fs: &str, wa: u64) -> PeerMeasurement {
        PeerMeasurement {
            system: system.to_owned(),
            workload: workload.to_owned(),
            sessions: 1,
            turns,
            filesystem: fs.to_owned(),
            logical_bytes: 1_000,
            device_bytes: 1_000 * wa,
            command: String::new(),
        }
    }

    /// Only the default path of forge-store is a line (not per-delta, not other
    /// options), only runs and peers on the chart's filesystem count, and W2 is dashed.
    #[test]
    fn the_lines_are_the_default_path_and_the_peers_on_one_filesystem() {
        // Each run that must not be drawn comes first, or has a T of its own, so that
        // it would show if it were not left out.
        let ms = vec![
            run("redb", Mode::Boundary, "journal=off", 100, "ext4", 9),
            run("redb", Mode::Boundary, "", 10, "ext4", 5),
            run("redb", Mode::Boundary, "", 100, "ext4", 4),
            run("redb", Mode::PerDelta, "", 1000, "ext4", 300),
            run("redb", Mode::Boundary, "", 1000, "xfs", 2),
        ];
        let data = Chartable::new(&ms);
        let peers = vec![
            peer("P", "W1", 10, "xfs", 13),
            peer("P", "W1", 10, "ext4", 11),
            peer("P", "W2", 10, "ext4", 12),
            peer("P", "W3", 10, "ext4", 14),
        ];
        let (systems, lines) = lines(&data, &peers, "ext4");
        assert_eq!(systems, ["forge-store, redb ★", "P"]);
        let line = |system, dashed, points: &[(f64, f64)]| Line {
            system,
            dashed,
            points: points.to_vec(),
        };
        assert_eq!(
            lines,
            [
                line(0, false, &[(10.0, 5.0), (100.0, 4.0)]),
                line(1, false, &[(10.0, 11.0)]),
                line(1, true, &[(10.0, 12.0)]),
            ]
        );
    }
}
