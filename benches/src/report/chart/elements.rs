//! What both charts draw with: log axes, tick labels, markers, legends and notes.

use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::FONT;

/// Powers of ten spanning `[min, max]` with some head room, and tick values on that
/// range (1-2-5 steps when it spans at most two decades).
pub(super) fn log_axis(min: f64, max: f64, below: f64, above: f64) -> (f64, f64, Vec<f64>) {
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

/// Tick labels without trailing zeros: `0.1`, `2`, `1000`.
/// The smallest and the largest of `values` (∞ and 0 for none: the values are
/// positive).
pub(super) fn extent(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    (
        values.clone().fold(f64::INFINITY, f64::min),
        values.fold(0.0, f64::max),
    )
}

/// A chart builder on `area` with the charts' margin and label areas, `y_labels`
/// pixels wide for the y labels.
pub(super) fn chart_builder<'b, DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    y_labels: u32,
) -> ChartBuilder<'_, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(y_labels);
    builder
}

/// Draws `mesh` with the axis descriptions `(x, y)` and the label formatters, in the
/// charts' fonts.
pub(super) fn draw_mesh<'a, 'b, X, Y, DB>(
    mesh: &mut MeshStyle<'a, 'b, X, Y, DB>,
    (x_desc, y_desc): (&str, &str),
    x_fmt: &'b dyn Fn(&X::ValueType) -> String,
    y_fmt: &'b dyn Fn(&Y::ValueType) -> String,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
    DB: DrawingBackend,
{
    mesh.x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(x_fmt)
        .y_label_formatter(y_fmt)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
}

pub(super) fn fmt_tick(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A filled marker of one of five shapes (by `shape`) at `at`.
pub(super) fn draw_marker<DB, CT>(
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
pub(super) enum Swatch {
    /// A filled square (a bar's colour).
    Bar(RGBColor),
    /// A line with the series' marker.
    Line(RGBColor, usize),
}

pub(super) fn draw_legend<DB: DrawingBackend>(
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

pub(super) fn draw_note<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    note: &str,
) -> anyhow::Result<()>
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
