use serde_json::{json, Value};
use tracedb_traceql::metrics::{Exemplar, LabelValue, Series};

use super::{instant, range};

// The answers as value trees, as they were written before: what the
// writer must give byte for byte.

fn number(v: f64) -> Value {
    if v.is_nan() {
        json!("NaN")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "Infinity" } else { "-Infinity" })
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        json!(v as i64)
    } else {
        json!(v)
    }
}

fn labels_json(labels: &[(String, LabelValue)]) -> Vec<Value> {
    labels
        .iter()
        .map(|(key, v)| {
            let value = match v {
                LabelValue::Str(s) => json!({ "stringValue": s }),
                LabelValue::Int(i) => json!({ "intValue": i.to_string() }),
                LabelValue::Float(f) => json!({ "doubleValue": number(*f) }),
                LabelValue::Bool(b) => json!({ "boolValue": b }),
            };
            json!({ "key": key, "value": value })
        })
        .collect()
}

fn series_json(s: &Series) -> Value {
    let samples: Vec<Value> = s
        .samples
        .iter()
        .map(|&(t, v)| {
            let mut sample = json!({ "timestampMs": t.to_string() });
            if v != 0.0 {
                sample["value"] = number(v);
            }
            sample
        })
        .collect();
    let mut out = json!({ "labels": labels_json(&s.labels), "samples": samples });
    if !s.exemplars.is_empty() {
        out["exemplars"] = Value::Array(s.exemplars.iter().map(exemplar_json).collect());
    }
    out
}

fn exemplar_json(e: &Exemplar) -> Value {
    let mut out = json!({ "labels": labels_json(&e.labels) });
    if e.value != 0.0 {
        out["value"] = number(e.value);
    }
    out["timestampMs"] = json!(e.timestamp_ms.to_string());
    out
}

fn with_partial(mut body: Value, partial: &[String]) -> String {
    if !partial.is_empty() {
        body["status"] = json!("PARTIAL");
        body["message"] = json!(partial.join("; "));
    }
    body.to_string()
}

fn range_tree(series: &[Series], partial: &[String]) -> String {
    let body = json!({
        "series": series.iter().map(series_json).collect::<Vec<Value>>(),
        "metrics": { "completedJobs": 1, "totalJobs": 1 },
    });
    with_partial(body, partial)
}

fn instant_tree(series: &[Series], partial: &[String]) -> String {
    let series: Vec<Value> = series
        .iter()
        .filter_map(|s| {
            let &(_, v) = s.samples.first()?;
            let mut out = json!({ "labels": labels_json(&s.labels) });
            if v != 0.0 {
                out["value"] = number(v);
            }
            Some(out)
        })
        .collect();
    let mut body = json!({ "metrics": { "completedJobs": 1, "totalJobs": 1 } });
    if !series.is_empty() {
        body["series"] = Value::Array(series);
    }
    with_partial(body, partial)
}

/// Series of every kind of label and value (whole, fractional, huge, zero,
/// negative, NaN, the infinities), with and without exemplars and samples,
/// partial or not: the writer gives the bytes the value trees gave.
#[test]
fn the_answers_json_is_the_value_trees_byte_for_byte() {
    let values = [
        0.0,
        1.0,
        -3.0,
        0.25,
        1.0 / 3.0,
        1e20,
        -9.5e15,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
    ];
    let label = |i: usize| -> (String, LabelValue) {
        let value = match i % 4 {
            0 => LabelValue::Str(format!("svc \"{i}\"\n\u{e9}")),
            1 => LabelValue::Int(i as i64 - 7),
            2 => LabelValue::Float(values[i % values.len()]),
            _ => LabelValue::Bool(i % 8 == 3),
        };
        (format!("resource.k{i}"), value)
    };
    let mut all = Vec::new();
    for n in 0..24usize {
        all.push(Series {
            labels: (0..n % 4).map(|i| label(n + i)).collect(),
            samples: (0..n % 5)
                .map(|i| {
                    (
                        1_796_000_000_000 + 60_000 * i as u64,
                        values[(n + i) % values.len()],
                    )
                })
                .collect(),
            exemplars: (0..n % 3)
                .map(|i| Exemplar {
                    labels: vec![label(n * 3 + i), label(n * 3 + i + 1)],
                    value: values[(n * 2 + i) % values.len()],
                    timestamp_ms: 1_796_000_000_123 + i as u64,
                })
                .collect(),
        });
    }
    let reasons = [
        "file 7 was not read".to_string(),
        "a \"quoted\" one".to_string(),
    ];
    let mut compared = 0;
    for partial in [&[][..], &reasons[..]] {
        for k in 0..all.len() {
            let some = &all[k..];
            assert_eq!(range(some, partial), range_tree(some, partial));
            assert_eq!(instant(some, partial), instant_tree(some, partial));
            compared += 1;
        }
        assert_eq!(range(&[], partial), range_tree(&[], partial));
        assert_eq!(instant(&[], partial), instant_tree(&[], partial));
    }
    assert_eq!(compared, 48);
    // Of series without samples, an instant answer has no `series`.
    let empty = &all[..1];
    assert!(empty[0].samples.is_empty());
    assert!(!instant(empty, &[]).contains("series"));
}
