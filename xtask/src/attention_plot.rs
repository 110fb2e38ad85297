//! The SVG plot of `cargo xtask bench-attention`'s JSON (issue 18): each kernel's speedup
//! over the best BF16 peer of its cell (the fastest of SDPA, FlashInfer and FlashInfer with
//! tensor cores) against the context, one panel per (shape, batch), one line per kernel
//! (the BF16 twin, ZipFusion fused base and zero-aware, GAAC fused), each point labelled with the byte
//! ratio of the data that kernel reads. A tiny writer: fixed-precision numbers, no
//! dependency, the same bytes for the same JSON.

use std::fmt::Write as _;

use crate::bench_attention::Cell;

/// Panel size and margins, in SVG user units (pixels).
const PANEL_W: f64 = 300.0;
const PANEL_H: f64 = 190.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 24.0;
const BOTTOM: f64 = 30.0;
const TITLE_H: f64 = 40.0;
const LEGEND_H: f64 = 26.0;

/// One plotted kernel: its legend name and colour.
const KERNELS: [(&str, &str); 4] = [
    ("BF16 twin", "#1f77b4"),
    ("ZipFusion fused", "#d62728"),
    ("ZipFusion zero-aware", "#2ca02c"),
    ("GAAC fused", "#9467bd"),
];

/// A point of a line: context, speedup over the best peer, byte ratio.
type Point = (usize, f64, f64);

/// The best peer's time in a cell (µs), where any peer ran.
pub(crate) fn best_peer(cell: &Cell) -> Option<f64> {
    [cell.sdpa_us, cell.flashinfer_us, cell.flashinfer_tc_us].into_iter().flatten().reduce(f64::min)
}

/// The kernels' lines of the cells of one panel, in context order: twin, then each fused
/// variant by position, then GAAC.
fn lines(cells: &[&Cell]) -> [Vec<Point>; 4] {
    let mut out: [Vec<Point>; 4] = Default::default();
    for cell in cells {
        let Some(best) = best_peer(cell) else { continue };
        out[0].push((cell.context, best / cell.twin_us, 1.0));
        for (i, f) in cell.fused.iter().take(2).enumerate() {
            out[i + 1].push((cell.context, best / f.us, f.ratio));
        }
        if let Some(g) = &cell.gaac {
            out[3].push((cell.context, best / g.us, g.ratio));
        }
    }
    for line in &mut out {
        line.sort_by_key(|p| p.0);
    }
    out
}

/// The SVG of `cells` (a bench-attention JSON's cells) with `title` on top.
pub(crate) fn svg(cells: &[Cell], title: &str) -> String {
    let mut panels: Vec<(String, usize)> = Vec::new();
    for c in cells {
        if !panels.iter().any(|(s, b)| *s == c.shape && *b == c.batch) {
            panels.push((c.shape.clone(), c.batch));
        }
    }
    let shapes: Vec<&str> = panels.iter().fold(Vec::new(), |mut v, (s, _)| {
        if !v.contains(&s.as_str()) {
            v.push(s.as_str());
        }
        v
    });
    let mut batches: Vec<usize> = panels.iter().map(|p| p.1).collect();
    batches.sort_unstable();
    batches.dedup();
    let mut contexts: Vec<usize> = cells.iter().map(|c| c.context).collect();
    contexts.sort_unstable();
    contexts.dedup();
    let (cols, rows) = (batches.len().max(1), shapes.len().max(1));
    let width = cols as f64 * PANEL_W;
    let height = TITLE_H + rows as f64 * PANEL_H + LEGEND_H;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="10">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="16" text-anchor="middle" font-size="13">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="32" text-anchor="middle">speedup over the best BF16 peer (min of SDPA, FlashInfer, FlashInfer TC) against context; labels: byte ratio read</text>"#,
        width / 2.0
    );
    // One y range for every panel, so that panels compare at a glance.
    let all: Vec<f64> = panels
        .iter()
        .flat_map(|(shape, batch)| {
            let cs: Vec<&Cell> = cells.iter().filter(|c| &c.shape == shape && c.batch == *batch).collect();
            lines(&cs).into_iter().flatten().map(|p| p.1).collect::<Vec<_>>()
        })
        .collect();
    let lo = all.iter().copied().fold(1.0_f64, f64::min);
    let hi = all.iter().copied().fold(1.0_f64, f64::max);
    let (y_min, y_max) = ((lo * 10.0).floor() / 10.0 - 0.05, (hi * 10.0).ceil() / 10.0 + 0.05);
    for (shape, batch) in &panels {
        let col = batches.iter().position(|b| b == batch).unwrap_or(0);
        let row = shapes.iter().position(|x| x == shape).unwrap_or(0);
        let x0 = col as f64 * PANEL_W + LEFT;
        let y0 = TITLE_H + row as f64 * PANEL_H + TOP;
        let (w, h) = (PANEL_W - LEFT - RIGHT, PANEL_H - TOP - BOTTOM);
        let x_of = |context: usize| {
            let i = contexts.iter().position(|&c| c == context).unwrap_or(0);
            if contexts.len() <= 1 { x0 + w / 2.0 } else { x0 + w * i as f64 / (contexts.len() - 1) as f64 }
        };
        let y_of = |v: f64| y0 + h * (y_max - v) / (y_max - y_min);
        let _ = writeln!(s, r#"<g>"#);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{} B={}</text>"#,
            x0 + w / 2.0,
            y0 - 8.0,
            escape(shape),
            batch
        );
        let _ = writeln!(
            s,
            r##"<rect x="{x0:.1}" y="{y0:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="#999"/>"##
        );
        // y grid every 0.1, labelled every 0.2; the 1.0 line (the best peer) dashed.
        let mut tick = (y_min * 10.0).ceil() as i64;
        while tick as f64 / 10.0 <= y_max {
            let v = tick as f64 / 10.0;
            let y = y_of(v);
            let style =
                if tick == 10 { r##"stroke="#444" stroke-dasharray="4 3""## } else { r##"stroke="#eee""## };
            let _ = writeln!(s, r#"<line x1="{x0:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" {style}/>"#, x0 + w);
            if tick % 2 == 0 {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{v:.1}x</text>"#,
                    x0 - 4.0,
                    y + 3.0
                );
            }
            tick += 1;
        }
        for &c in &contexts {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}K</text>"#,
                x_of(c),
                y0 + h + 13.0,
                c / 1024
            );
        }
        let cs: Vec<&Cell> = cells.iter().filter(|c| &c.shape == shape && c.batch == *batch).collect();
        for (line, (_, colour)) in lines(&cs).iter().zip(KERNELS) {
            if line.is_empty() {
                continue;
            }
            let pts: Vec<String> =
                line.iter().map(|&(c, v, _)| format!("{:.1},{:.1}", x_of(c), y_of(v))).collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="1.5"/>"#,
                pts.join(" ")
            );
            for &(c, v, ratio) in line {
                let (x, y) = (x_of(c), y_of(v));
                let _ = writeln!(s, r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.5" fill="{colour}"/>"#);
                // Labels right of the point in the panel's left half, left of it in the right.
                let (lx, anchor) = if x > x0 + w / 2.0 { (x - 3.0, "end") } else { (x + 3.0, "start") };
                let _ = writeln!(
                    s,
                    r#"<text x="{lx:.1}" y="{:.1}" fill="{colour}" font-size="8" text-anchor="{anchor}">{v:.2}x r{ratio:.2}</text>"#,
                    y - 3.0
                );
            }
        }
        let _ = writeln!(s, r#"</g>"#);
    }
    let legend_y = TITLE_H + rows as f64 * PANEL_H + 14.0;
    for (i, (name, colour)) in KERNELS.iter().enumerate() {
        let x = 20.0 + i as f64 * 170.0;
        let _ = writeln!(
            s,
            r#"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2"/>"#,
            legend_y - 3.0,
            x + 18.0,
            legend_y - 3.0
        );
        let _ = writeln!(s, r#"<text x="{:.1}" y="{legend_y:.1}">{name}</text>"#, x + 22.0);
    }
    s.push_str("</svg>\n");
    s
}

/// `text` with the XML specials escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed bench-attention JSON: two shapes, two batches, two contexts, a cell without
    /// peers (left out of the plot) and one without fused rows.
    const JSON: &str = include_str!("../tests/data/attention-plot.json");

    #[derive(serde::Deserialize)]
    struct Report {
        cells: Vec<Cell>,
    }

    #[test]
    fn the_plot_of_a_fixed_json_is_stable() {
        let report: Report = serde_json::from_str(JSON).unwrap();
        insta::assert_snapshot!(svg(&report.cells, "fixed test data"));
    }

    #[test]
    fn the_best_peer_is_the_fastest_present() {
        let report: Report = serde_json::from_str(JSON).unwrap();
        let times: Vec<Option<f64>> = report.cells.iter().map(best_peer).collect();
        assert_eq!(times, [Some(20.0), Some(90.0), Some(75.0), Some(300.0), None, Some(12.0)]);
    }
}
