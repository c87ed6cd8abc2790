//! Writing figures in Prometheus' text format (0.0.4), through the Prometheus
//! project's own Rust client.
//!
//! Every figure tracedb exports already lives somewhere (a relaxed atomic, an
//! engine's stats snapshot), so nothing here registers live metric objects:
//! [`render`] runs one collector when `/metrics` is scraped, which reads the
//! figures and writes them as constant samples. The client does the format:
//! the `# HELP` and `# TYPE` lines, label escaping, number formatting, the
//! `_total` of counters and the buckets of histograms.
//!
//! Names are given here as they are scraped: a counter's ends in `_total`.

use std::fmt;

pub use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::{
    collector::Collector,
    encoding::{EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge, MetricType},
    registry::Registry,
};

/// The `Content-Type` of what [`render`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Labels of one sample, `(name, value)`; empty for none.
pub type Labels = Vec<(&'static str, String)>;

/// The labels of an unlabelled sample.
pub const NO_LABELS: [(&str, &str); 0] = [];

/// What a family's samples are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (from the process's start); its name ends in `_total`.
    Counter,
    /// Any value, as read now.
    Gauge,
}

/// Writes one family: its help and type, then one sample per `(labels,
/// value)`. A family without samples is still described.
pub fn family<L, V>(
    out: &mut DescriptorEncoder<'_>,
    kind: Kind,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result
where
    L: EncodeLabelSet,
    V: EncodeCounterValue + EncodeGaugeValue,
{
    let (name, metric_type) = match kind {
        // The client writes the suffix back after the name it is given.
        Kind::Counter => (counter_stem(name), MetricType::Counter),
        Kind::Gauge => (name, MetricType::Gauge),
    };
    let mut metric = out.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in samples {
        let sample = metric.encode_family(&labels)?;
        match kind {
            Kind::Counter => ConstCounter::new(value).encode(sample)?,
            Kind::Gauge => ConstGauge::new(value).encode(sample)?,
        }
    }
    Ok(())
}

/// Writes a family with one unlabelled sample.
pub fn single<V>(
    out: &mut DescriptorEncoder<'_>,
    kind: Kind,
    name: &str,
    help: &str,
    value: V,
) -> fmt::Result
where
    V: EncodeCounterValue + EncodeGaugeValue,
{
    family(out, kind, name, help, [(NO_LABELS, value)])
}

/// A counter's name without the `_total` the client adds.
fn counter_stem(name: &str) -> &str {
    debug_assert!(
        name.ends_with("_total"),
        "counter {name} must end in _total"
    );
    name.strip_suffix("_total").unwrap_or(name)
}

/// The whole document, as `collect` writes it.
pub fn render<F>(collect: F) -> String
where
    F: Fn(&mut DescriptorEncoder<'_>) -> fmt::Result + Send + Sync + 'static,
{
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Collect(collect)));
    let mut text = String::new();
    // Writing to a String cannot fail, and the collectors fail only when the
    // writer does.
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry) {
        tracing::error!(error = %e, "encoding /metrics failed");
    }
    text
}

/// A function as the client's collector.
struct Collect<F>(F);

impl<F> fmt::Debug for Collect<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Collect")
    }
}

impl<F> Collector for Collect<F>
where
    F: Fn(&mut DescriptorEncoder<'_>) -> fmt::Result + Send + Sync + 'static,
{
    fn encode(&self, mut out: DescriptorEncoder<'_>) -> fmt::Result {
        (self.0)(&mut out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two(out: &mut DescriptorEncoder<'_>) -> fmt::Result {
        family(
            out,
            Kind::Counter,
            "x_requests_total",
            "Requests, by \"kind\".",
            [
                (vec![("kind", "a\"b".to_owned())], 3u64),
                (vec![("kind", "c".to_owned())], 4),
            ],
        )?;
        single(out, Kind::Gauge, "x_ratio", "A ratio.", 0.5f64)?;
        family(
            out,
            Kind::Gauge,
            "x_none",
            "No samples.",
            Vec::<(Labels, u64)>::new(),
        )
    }

    #[test]
    fn families_are_written_in_the_text_format() {
        let text = render(two);
        assert_eq!(
            text,
            "# HELP x_requests_total Requests, by \"kind\".\n\
             # TYPE x_requests_total counter\n\
             x_requests_total{kind=\"a\\\"b\"} 3\n\
             x_requests_total{kind=\"c\"} 4\n\
             # HELP x_ratio A ratio.\n\
             # TYPE x_ratio gauge\n\
             x_ratio 0.5\n\
             # HELP x_none No samples.\n\
             # TYPE x_none gauge\n"
        );
    }
}
