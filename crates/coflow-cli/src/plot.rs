//! `coflow sim --plot FILE`: the CCT distribution of every policy on a log axis (as Varys Figure 8)
//! beside each policy's improvement of average CCT over the baseline per bin (as Varys Figure 9;
//! on a wide area per size bin, as the table shows them), as SVG or PNG.
//!
//! Text is laid out (and, in PNG, drawn) with Noto Sans from the `ttf-noto-sans` crate through
//! plotters' `ab_glyph` backend, so a plot needs no system font and looks the same everywhere.
//! SVG keeps its text as `<text>` elements.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use coflow_core::Nanos;
use coflow_sim::{SimResult, Summary};
use plotters::coord::Shift;
use plotters::prelude::*;

/// The picture's size in pixels.
const SIZE: (u32, u32) = (1500, 640);
/// At most this many steps per CDF curve: a larger run is thinned to steps of at least
/// `1 / MAX_STEPS` of the coflows.
const MAX_STEPS: usize = 2000;

/// The image formats `--plot` writes, chosen by the file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Svg,
    Png,
}

impl Format {
    /// The format of `path` from its extension (`.svg` or `.png`, case ignored).
    pub(crate) fn of(path: &Path) -> Result<Format> {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => bail!("--plot {}: the file name must end in .svg or .png", path.display()),
        }
    }
}

/// What to draw: each policy's run and figures (the baseline's among them if it ran).
#[derive(Debug)]
pub(crate) struct Figure<'a> {
    /// A line above both panels naming the workload.
    pub(crate) title: String,
    /// The runs, in report order, each with its summary against the baseline.
    pub(crate) runs: Vec<(&'a SimResult, &'a Summary)>,
    /// The baseline policy's name, if there is one.
    pub(crate) baseline: Option<&'a str>,
}

/// Draws `fig` into `path`, as SVG or PNG by its extension.
pub(crate) fn write(path: &Path, fig: &Figure<'_>) -> Result<()> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, ttf_noto_sans::REGULAR)
        .map_err(|_| anyhow!("the embedded font does not parse"))?;
    let bytes = match Format::of(path)? {
        Format::Svg => {
            let mut text = String::new();
            {
                let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
                draw(&root, fig)?;
                root.present().map_err(|e| anyhow!("drawing the plot: {e}"))?;
            }
            text.into_bytes()
        }
        Format::Png => {
            let mut rgb = vec![0u8; SIZE.0 as usize * SIZE.1 as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
                draw(&root, fig)?;
                root.present().map_err(|e| anyhow!("drawing the plot: {e}"))?;
            }
            encode_png(&rgb)?
        }
    };
    crate::output::write(path, &bytes)
}

/// An RGB buffer of [`SIZE`] as a PNG file.
fn encode_png(rgb: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, SIZE.0, SIZE.1);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().context("encoding the PNG")?;
    w.write_image_data(rgb).context("encoding the PNG")?;
    w.finish().context("encoding the PNG")?;
    Ok(out)
}

/// The colour of the `i`-th policy that is not the baseline (the baseline is black): the
/// Tableau 10 palette, distinct in print and for the common colour-vision deficiencies, then its
/// ten lighter shades (Tableau 20), so that the fifteen policies of `--policies all` differ.
fn color(i: usize) -> RGBColor {
    const PALETTE: [(u8, u8, u8); 20] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
        (174, 199, 232),
        (255, 187, 120),
        (152, 223, 138),
        (255, 152, 150),
        (197, 176, 213),
        (196, 156, 148),
        (247, 182, 210),
        (199, 199, 199),
        (219, 219, 141),
        (158, 218, 229),
    ];
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// Each run's colour: black for the baseline, the palette in order for the others.
fn colors(fig: &Figure<'_>) -> Vec<RGBColor> {
    let mut next = 0;
    fig.runs
        .iter()
        .map(|(r, _)| {
            if Some(r.policy.as_str()) == fig.baseline {
                BLACK
            } else {
                next += 1;
                color(next - 1)
            }
        })
        .collect()
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, fig: &Figure<'_>) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing the plot: {e}");
    root.fill(&WHITE).map_err(err)?;
    let body = root.titled(&fig.title, ("sans-serif", 22)).map_err(err)?;
    let colors = colors(fig);
    let has_bars = fig.baseline.is_some() && fig.runs.iter().any(|(r, _)| Some(r.policy.as_str()) != fig.baseline);
    let (charts, key) = body.split_horizontally(SIZE.0 - LEGEND_WIDTH);
    if has_bars {
        let (left, right) = charts.split_horizontally((SIZE.0 - LEGEND_WIDTH) * 47 / 100);
        cdf(&left, fig, &colors).map_err(err)?;
        bars(&right, fig, &colors).map_err(err)?;
    } else {
        cdf(&charts, fig, &colors).map_err(err)?;
    }
    legend(&key, fig, &colors).map_err(err)?;
    Ok(())
}

/// The width of the legend column at the right, shared by both panels.
const LEGEND_WIDTH: u32 = 170;

/// The policies' colours, one per line, in a column of their own so that no curve or bar hides
/// under them.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    fig: &Figure<'_>,
    colors: &[RGBColor],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let top = 64;
    area.draw(&Text::new("policy", (12, top - 34), ("sans-serif", 17)))?;
    for (i, ((r, _), &c)) in fig.runs.iter().zip(colors).enumerate() {
        let y = top + 26 * i as i32;
        let baseline = Some(r.policy.as_str()) == fig.baseline;
        area.draw(&Rectangle::new([(12, y - 6), (38, y + 6)], c.filled()))?;
        let name = if baseline { format!("{} (baseline)", r.policy) } else { r.policy.clone() };
        area.draw(&Text::new(name, (46, y - 9), ("sans-serif", 16)))?;
    }
    Ok(())
}

/// Powers of ten from the one at or below `lo` to the one at or above `hi`.
fn decades(lo: f64, hi: f64) -> (i32, i32) {
    let a = lo.log10().floor() as i32;
    let b = (hi.log10().ceil() as i32).max(a + 1);
    (a, b)
}

/// A time in seconds as a short axis label: `1ms`, `0.1s`, `10s`, `1000s`.
fn seconds_label(s: f64) -> String {
    if s < 1e-3 {
        format!("{}µs", round_sig(s * 1e6))
    } else if s < 0.1 {
        format!("{}ms", round_sig(s * 1e3))
    } else {
        format!("{}s", round_sig(s))
    }
}

/// `x` printed without trailing digits noise (axis ticks are powers of ten or 2 and 5 times them).
fn round_sig(x: f64) -> String {
    let r = (x * 1e3).round() / 1e3;
    format!("{r}")
}

/// The CDF step points of one run's CCTs, over all of the workload's coflows (rejected or unfinished
/// ones never arrive, so the curve then tops out below 1), with times clamped to `lo` on the log
/// axis and the curve carried on to `hi`.
fn cdf_points(r: &SimResult, lo: f64, hi: f64) -> Vec<(f64, f64)> {
    let n = r.outcomes.len().max(1) as f64;
    let mut ccts: Vec<f64> = r.outcomes.iter().filter_map(|o| o.cct()).map(Nanos::as_secs_f64).collect();
    ccts.sort_by(f64::total_cmp);
    let mut pts = vec![(lo, 0.0)];
    let mut shown = 0.0;
    for (i, &c) in ccts.iter().enumerate() {
        let y = (i + 1) as f64 / n;
        let last = i + 1 == ccts.len();
        let same_time_next = ccts.get(i + 1).is_some_and(|&next| next == c);
        if !last && (same_time_next || y - shown < 1.0 / MAX_STEPS as f64) {
            continue;
        }
        let x = c.max(lo);
        pts.push((x, shown));
        pts.push((x, y));
        shown = y;
    }
    pts.push((hi, shown));
    pts
}

fn cdf<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    fig: &Figure<'_>,
    colors: &[RGBColor],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let positive =
        fig.runs.iter().flat_map(|(r, _)| r.outcomes.iter().filter_map(|o| o.cct())).filter(|c| *c > Nanos::ZERO);
    let (lo, hi) = positive
        .map(Nanos::as_secs_f64)
        .fold(None, |acc: Option<(f64, f64)>, c| Some(acc.map_or((c, c), |(a, b)| (a.min(c), b.max(c)))))
        .unwrap_or((1e-3, 1.0));
    let (a, b) = decades(lo, hi);
    let (lo, hi) = (10f64.powi(a), 10f64.powi(b));
    let ticks: Vec<f64> = (a..=b).map(|e| 10f64.powi(e)).collect();

    let mut chart = ChartBuilder::on(area)
        .caption("Coflow completion times (CDF, log axis)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((lo..hi).log_scale().with_key_points(ticks), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("coflow completion time")
        .y_desc("fraction of coflows")
        .x_label_formatter(&|x| seconds_label(*x))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .max_light_lines(0)
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()?;
    // Draw the baseline last so that it stays visible where curves coincide.
    let mut order: Vec<usize> = (0..fig.runs.len()).collect();
    order.sort_by_key(|&i| Some(fig.runs[i].0.policy.as_str()) == fig.baseline);
    for i in order {
        let (r, _) = fig.runs[i];
        let c = colors[i];
        let width = if Some(r.policy.as_str()) == fig.baseline { 3 } else { 2 };
        chart.draw_series(LineSeries::new(cdf_points(r, lo, hi), c.stroke_width(width)))?;
    }
    Ok(())
}

/// Tick values for a log axis of factors from `lo` to `hi`: 1, 2 and 5 times powers of ten.
fn factor_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = decades(lo, hi);
    let all = (a..=b).flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)));
    all.filter(|&t| t >= lo * 0.999 && t <= hi * 1.001).collect()
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    fig: &Figure<'_>,
    colors: &[RGBColor],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let baseline = fig.baseline.unwrap_or("-");
    let others: Vec<usize> = (0..fig.runs.len()).filter(|&i| fig.runs[i].0.policy != baseline).collect();
    // Groups: the four bins (Varys's, or on a wide area Siphon's size bins), then all coflows.
    let wide = fig.runs[0].1.wide_area.is_some();
    let bins = |s: &Summary| -> Vec<(&'static str, usize, Option<f64>)> {
        match &s.wide_area {
            Some(w) => w.bins.iter().map(|b| (b.bin, b.coflows, b.factor_vs_baseline)).collect(),
            None => s.bins.iter().map(|b| (b.bin, b.coflows, b.factor_vs_baseline)).collect(),
        }
    };
    let groups: Vec<String> = {
        let s = fig.runs[0].1;
        let mut g: Vec<String> = bins(s).iter().map(|(bin, coflows, _)| format!("{bin} ({coflows})")).collect();
        g.push(format!("all ({})", s.coflows));
        g
    };
    let factor = |s: &Summary, g: usize| match bins(s).get(g) {
        Some(&(_, _, f)) => f,
        None => s.factor_vs_baseline,
    };
    let values = others.iter().flat_map(|&i| (0..groups.len()).filter_map(move |g| factor(fig.runs[i].1, g)));
    let (lo, hi) =
        values.filter(|f| f.is_finite() && *f > 0.0).fold((1.0f64, 1.0f64), |(a, b), f| (a.min(f), b.max(f)));
    let (lo, hi) = (lo / 1.3, hi * 1.3);

    // Group `g` is centred on `x = g`, so that the axis's own key points (the integers) fall on
    // the groups.
    let n = groups.len() as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("Improvement of average CCT over {baseline}, per bin"), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5..n - 0.5, (lo..hi).log_scale().with_key_points(factor_ticks(lo, hi)))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(if wide { "size bin (coflows): total bytes" } else { "Varys bin (coflows): short/long, narrow/wide" })
        .y_desc(format!("factor of improvement over {baseline}"))
        .x_labels(groups.len())
        .x_label_formatter(&|x| {
            let g = x.round();
            let on_a_group = (x - g).abs() < 1e-6 && g >= 0.0;
            on_a_group.then(|| groups.get(g as usize).cloned()).flatten().unwrap_or_default()
        })
        .y_label_formatter(&|y| format!("{}x", round_sig(*y)))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .max_light_lines(0)
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()?;
    // Bars grow from 1x: up for faster than the baseline, down for slower.
    let slot = 0.84 / others.len().max(1) as f64;
    for (k, &i) in others.iter().enumerate() {
        let c = colors[i];
        let rects = (0..groups.len()).filter_map(|g| {
            let f = factor(fig.runs[i].1, g)?.clamp(lo, hi);
            let x0 = g as f64 - 0.42 + k as f64 * slot;
            Some(Rectangle::new([(x0, 1.0), (x0 + slot * 0.9, f)], c.filled()))
        });
        chart.draw_series(rects)?;
    }
    chart.draw_series(std::iter::once(PathElement::new(vec![(-0.5, 1.0), (n - 0.5, 1.0)], BLACK.stroke_width(2))))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_come_from_the_extension() {
        assert_eq!(Format::of(Path::new("a/b.svg")).unwrap(), Format::Svg);
        assert_eq!(Format::of(Path::new("B.PNG")).unwrap(), Format::Png);
        let e = Format::of(Path::new("plot.pdf")).unwrap_err().to_string();
        assert!(e.contains(".svg or .png"), "{e}");
    }

    #[test]
    fn axis_labels_read_as_times_and_factors() {
        assert_eq!(seconds_label(1e-3), "1ms");
        assert_eq!(seconds_label(0.01), "10ms");
        assert_eq!(seconds_label(0.1), "0.1s");
        assert_eq!(seconds_label(1000.0), "1000s");
        assert_eq!(seconds_label(1e-5), "10µs");
        assert_eq!(factor_ticks(0.3, 12.0), vec![0.5, 1.0, 2.0, 5.0, 10.0]);
        assert_eq!(decades(0.013, 434.0), (-2, 3));
    }
}
