//! Prometheus text exposition (format 0.0.4) as Go's client library
//! writes it: families sorted by name, `# HELP` and `# TYPE` lines,
//! labels sorted by name, series sorted by their labels, values as Go's
//! `strconv.FormatFloat(v, 'g', -1, 64)`, optional millisecond
//! timestamps.

use std::collections::BTreeMap;
use std::fmt::Write;

/// A metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A counter.
    Counter,
    /// A gauge.
    Gauge,
    /// A histogram (series are written as given: `_bucket`, `_sum`,
    /// `_count`).
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

#[derive(Debug, Clone)]
struct Series {
    /// Name suffix (histograms: `_bucket`, …).
    suffix: &'static str,
    labels: Vec<(String, String)>,
    value: f64,
    timestamp: Option<i64>,
}

#[derive(Debug, Clone)]
struct Family {
    help: String,
    kind: Kind,
    series: Vec<Series>,
}

/// Metric families being written.
#[derive(Debug, Default)]
pub struct Families {
    families: BTreeMap<String, Family>,
}

impl Families {
    /// Declares family `name` (a family without series is not written).
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        self.families
            .entry(name.to_string())
            .or_insert_with(|| Family {
                help: help.to_string(),
                kind,
                series: Vec::new(),
            });
    }

    /// Adds a series to family `name` (declared with [`Families::family`]).
    pub fn add(&mut self, name: &str, labels: &[(&str, &str)], value: f64, timestamp: Option<i64>) {
        self.add_suffixed(name, "", labels, value, timestamp);
    }

    /// Adds a `_bucket`/`_sum`/`_count` series of histogram `name`.
    pub fn add_suffixed(
        &mut self,
        name: &str,
        suffix: &'static str,
        labels: &[(&str, &str)],
        value: f64,
        timestamp: Option<i64>,
    ) {
        let Some(f) = self.families.get_mut(name) else {
            return;
        };
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // `le` stays last, as the Go client writes it
        labels.sort_by(|a, b| (a.0 == "le", &a.0).cmp(&(b.0 == "le", &b.0)));
        f.series.push(Series {
            suffix,
            labels,
            value,
            timestamp,
        });
    }

    /// The exposition text.
    pub fn render(mut self) -> String {
        let mut out = String::new();
        for (name, f) in &mut self.families {
            if f.series.is_empty() {
                continue;
            }
            let _ = writeln!(out, "# HELP {name} {}", escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {name} {}", f.kind.as_str());
            if f.kind != Kind::Histogram {
                f.series.sort_by(|a, b| a.labels.cmp(&b.labels));
                f.series.dedup_by(|a, b| a.labels == b.labels);
            }
            for s in &f.series {
                out.push_str(name);
                out.push_str(s.suffix);
                if !s.labels.is_empty() {
                    out.push('{');
                    for (i, (k, v)) in s.labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{k}=\"{}\"", escape_label(v));
                    }
                    out.push('}');
                }
                out.push(' ');
                out.push_str(&go_float(s.value));
                if let Some(t) = s.timestamp {
                    let _ = write!(out, " {t}");
                }
                out.push('\n');
            }
        }
        out
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('"', "\\\"")
}

/// `v` as Go's `strconv.FormatFloat(v, 'g', -1, 64)`: the shortest digits
/// that read back as `v`, in exponent form (at least two exponent
/// digits) when the decimal exponent is below −4 or at least 6.
pub fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` is the shortest round-trip form: "d.ddde±x"
    let e = format!("{v:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{v}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_go_writes_them() {
        // values from upstream kubelet's own /metrics/resource
        for (v, want) in [
            (258048.0, "258048"),
            (8228864.0, "8.228864e+06"),
            (15.043531859, "15.043531859"),
            (1.7964754885907547e9, "1.7964754885907547e+09"),
            (23768.069621614, "23768.069621614"),
            (5.2663296e9, "5.2663296e+09"),
            (0.0, "0"),
            (1.0, "1"),
            (100000.0, "100000"),
            (1000000.0, "1e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (f64::INFINITY, "+Inf"),
        ] {
            assert_eq!(go_float(v), want, "{v}");
        }
    }

    #[test]
    fn families_sorted_series_sorted_labels_sorted() {
        let mut f = Families::default();
        f.family("b_total", Kind::Counter, "B things.");
        f.family("a", Kind::Gauge, "A \\ thing\nnext");
        f.family("unused", Kind::Gauge, "never written");
        f.add(
            "b_total",
            &[("pod", "p2"), ("namespace", "n")],
            2.0,
            Some(5),
        );
        f.add(
            "b_total",
            &[("pod", "p1"), ("namespace", "n")],
            1.0,
            Some(5),
        );
        f.add("a", &[("x", "say \"hi\"")], 3.0, None);
        assert_eq!(
            f.render(),
            "# HELP a A \\\\ thing\\nnext\n# TYPE a gauge\na{x=\"say \\\"hi\\\"\"} 3\n\
             # HELP b_total B things.\n# TYPE b_total counter\n\
             b_total{namespace=\"n\",pod=\"p1\"} 1 5\nb_total{namespace=\"n\",pod=\"p2\"} 2 5\n"
        );
    }
}
