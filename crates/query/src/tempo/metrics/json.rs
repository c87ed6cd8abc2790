//! The metrics answers' JSON, written straight from the series: a range
//! answer of a few hundred series holds tens of thousands of samples, and
//! building each as a `serde_json::Value` object (a map per sample) took
//! more of the answer's CPU than the query (docs/BENCHMARKS.md). Objects'
//! keys are written in ascending order, as `serde_json::Value`'s maps
//! write them, so the bytes are those the value trees gave.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use tracedb_traceql::metrics::{Exemplar, LabelValue, Series};

/// A number as Tempo's JSON writes it: whole numbers without a fraction,
/// NaN and the infinities as strings.
pub(super) struct Number(pub f64);

impl Serialize for Number {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_nan() {
            s.serialize_str("NaN")
        } else if v.is_infinite() {
            s.serialize_str(if v > 0.0 { "Infinity" } else { "-Infinity" })
        } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
            s.serialize_i64(v as i64)
        } else {
            s.serialize_f64(v)
        }
    }
}

/// Labels: `[{"key": …, "value": {"stringValue": …}}, …]`.
struct Labels<'a>(&'a [(String, LabelValue)]);

impl Serialize for Labels<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for (key, value) in self.0 {
            seq.serialize_element(&Label(key, value))?;
        }
        seq.end()
    }
}

struct Label<'a>(&'a str, &'a LabelValue);

impl Serialize for Label<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("key", self.0)?;
        map.serialize_entry("value", &Value(self.1))?;
        map.end()
    }
}

struct Value<'a>(&'a LabelValue);

impl Serialize for Value<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        match self.0 {
            LabelValue::Str(v) => map.serialize_entry("stringValue", v)?,
            LabelValue::Int(i) => map.serialize_entry("intValue", &i.to_string())?,
            LabelValue::Float(f) => map.serialize_entry("doubleValue", &Number(*f))?,
            LabelValue::Bool(b) => map.serialize_entry("boolValue", b)?,
        }
        map.end()
    }
}

/// A Unix millisecond timestamp, as a string.
struct Millis(u64);

impl Serialize for Millis {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// A sample: `{"timestampMs": "…", "value": …}`, the value left out when 0.
struct Sample(u64, f64);

impl Serialize for Sample {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("timestampMs", &Millis(self.0))?;
        if self.1 != 0.0 {
            map.serialize_entry("value", &Number(self.1))?;
        }
        map.end()
    }
}

struct Samples<'a>(&'a [(u64, f64)]);

impl Serialize for Samples<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|&(t, v)| Sample(t, v)))
    }
}

struct ExemplarJson<'a>(&'a Exemplar);

impl Serialize for ExemplarJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("labels", &Labels(&e.labels))?;
        map.serialize_entry("timestampMs", &Millis(e.timestamp_ms))?;
        if e.value != 0.0 {
            map.serialize_entry("value", &Number(e.value))?;
        }
        map.end()
    }
}

/// A series of a range answer: its exemplars (when it has some), labels
/// and samples.
struct RangeSeries<'a>(&'a Series);

impl Serialize for RangeSeries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let series = self.0;
        let mut map = s.serialize_map(None)?;
        if !series.exemplars.is_empty() {
            map.serialize_entry("exemplars", &Seq(series.exemplars.iter().map(ExemplarJson)))?;
        }
        map.serialize_entry("labels", &Labels(&series.labels))?;
        map.serialize_entry("samples", &Samples(&series.samples))?;
        map.end()
    }
}

/// A series of an instant answer: its labels and its one value (left out
/// when 0).
struct InstantSeries<'a>(&'a [(String, LabelValue)], f64);

impl Serialize for InstantSeries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("labels", &Labels(self.0))?;
        if self.1 != 0.0 {
            map.serialize_entry("value", &Number(self.1))?;
        }
        map.end()
    }
}

/// Items written as a JSON array.
struct Seq<I>(I);

impl<I: Iterator<Item = T> + Clone, T: Serialize> Serialize for Seq<I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.clone())
    }
}

/// The answer's object: `message` and `status` when it is partial,
/// Tempo's `metrics`, and the series (left out when `series` is `None`).
struct Answer<'a, T> {
    partial: &'a [String],
    series: Option<T>,
}

impl<T: Serialize> Serialize for Answer<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        if !self.partial.is_empty() {
            map.serialize_entry("message", &self.partial.join("; "))?;
        }
        map.serialize_entry("metrics", &Jobs)?;
        if let Some(series) = &self.series {
            map.serialize_entry("series", series)?;
        }
        if !self.partial.is_empty() {
            map.serialize_entry("status", "PARTIAL")?;
        }
        map.end()
    }
}

/// `{"completedJobs": 1, "totalJobs": 1}`: one node answered whole.
struct Jobs;

impl Serialize for Jobs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("completedJobs", &1)?;
        map.serialize_entry("totalJobs", &1)?;
        map.end()
    }
}

fn to_string(v: &impl Serialize) -> String {
    serde_json::to_string(v).expect("the answer's JSON is written to a string")
}

/// `GET /api/metrics/query_range`'s body: every series with its samples
/// and exemplars; `partial` the reasons some of it is missing.
pub(super) fn range(series: &[Series], partial: &[String]) -> String {
    to_string(&Answer {
        partial,
        series: Some(Seq(series.iter().map(RangeSeries))),
    })
}

/// `GET /api/metrics/query`'s body: each series with a sample, its value;
/// no `series` at all when none has one.
pub(super) fn instant(series: &[Series], partial: &[String]) -> String {
    let with_value = series
        .iter()
        .filter_map(|s| Some(InstantSeries(&s.labels, s.samples.first()?.1)));
    let any = with_value.clone().next().is_some();
    to_string(&Answer {
        partial,
        series: any.then_some(Seq(with_value)),
    })
}

#[cfg(test)]
mod tests;
