//! One SVG with two charts: write amplification per backend (`wa`) and physical
//! bytes against turns (`bytes`), sharing colours (per mode/policy) and markers (per
//! backend); with peers, a third (`peers`): forge-store's default path beside the
//! systems users run instead, device bytes per logical byte against turns.

mod bytes;
mod elements;
mod peers;
mod wa;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use anyhow::{bail, Context as _};
use plotters::prelude::*;

use super::{series_key, sorted, PeerMeasurement, SeriesKey};
use crate::Measurement;

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

/// What both charts draw: measurements with bytes of the chosen [`Basis`], and the
/// colour (per mode/policy) and marker (per backend) assignment shared by the charts.
struct Chartable<'a> {
    rows: Vec<&'a Measurement>,
    basis: Basis,
    series: Vec<SeriesKey>,
    backends: Vec<String>,
}

/// Which bytes the charts draw: the device's on one filesystem when any run measured
/// it (the first filesystem in report order), else the engines' own counters.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Basis {
    Device(String),
    Engine,
}

impl Basis {
    fn of(ms: &[&Measurement]) -> Self {
        ms.iter()
            .filter(|m| m.device_bytes.is_some())
            .filter_map(|m| m.filesystem.clone())
            .min()
            .map_or(Self::Engine, Self::Device)
    }

    fn bytes(&self, m: &Measurement) -> Option<u64> {
        match self {
            Self::Device(fs) => m
                .device_bytes
                .filter(|_| m.filesystem.as_deref() == Some(fs.as_str())),
            Self::Engine => m.physical.as_ref().map(|p| p.bytes),
        }
    }

    fn amplification(&self, m: &Measurement) -> Option<f64> {
        let bytes = self.bytes(m)?;
        (m.logical_bytes > 0).then(|| bytes as f64 / m.logical_bytes as f64)
    }

    /// `device bytes (ext4)` / `engine-counted bytes`.
    fn label(&self) -> String {
        match self {
            Self::Device(fs) => format!("device bytes, {fs}"),
            Self::Engine => "engine-counted bytes".to_owned(),
        }
    }
}

impl<'a> Chartable<'a> {
    fn new(ms: &'a [Measurement]) -> Self {
        let all = sorted(ms);
        let basis = Basis::of(&all);
        let rows: Vec<&Measurement> = all
            .into_iter()
            .filter(|m| basis.bytes(m).is_some_and(|b| b > 0))
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
            basis,
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

/// The two charts as one SVG document: write amplification per backend and
/// mode/policy for one workload (a), and bytes written against T for single-session
/// W1 runs (b), on the device where measured (else the engines' counters).
/// Measurements without those bytes are left out; it is an error when none has them.
pub fn svg(ms: &[Measurement]) -> anyhow::Result<String> {
    svg_with_peers(ms, &[])
}

/// [`svg`], and when `peers` is not empty a third chart (c): device bytes per logical
/// byte against T for forge-store's default path on each backend beside the peers.
pub fn svg_with_peers(ms: &[Measurement], peers: &[PeerMeasurement]) -> anyhow::Result<String> {
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
    let panels = if peers.is_empty() { 2 } else { 3 };
    let mut out = String::new();
    {
        let root =
            SVGBackend::with_string(&mut out, (WIDTH, panels * PANEL_HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, rest) = root.split_vertically(PANEL_HEIGHT);
        let (middle, bottom) = rest.split_vertically(PANEL_HEIGHT);
        wa::draw_wa_chart(&top.margin(10, 10, 10, 10), &data)?;
        bytes::draw_bytes_chart(&middle.margin(10, 10, 10, 10), &data)?;
        if !peers.is_empty() {
            peers::draw_peers_chart(&bottom.margin(10, 10, 10, 10), &data, peers)?;
        }
        root.present()?;
    }
    Ok(out)
}

/// Writes [`svg`] to `path`.
pub fn write_svg(ms: &[Measurement], path: &Path) -> anyhow::Result<()> {
    write_svg_with_peers(ms, &[], path)
}

/// Writes [`svg_with_peers`] to `path`.
pub fn write_svg_with_peers(
    ms: &[Measurement],
    peers: &[PeerMeasurement],
    path: &Path,
) -> anyhow::Result<()> {
    let doc = svg_with_peers(ms, peers)?;
    fs::write(path, doc).with_context(|| format!("writing {}", path.display()))
}
