//! Tempo's parameter rules for metrics requests.

use super::*;

fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const NOW: u64 = 1_700_000_000 * SEC;

fn refused(pairs: &[(&str, &str)]) -> String {
    match range_request(&params(pairs), NOW) {
        Ok(r) => panic!("{pairs:?} was taken: {:?}", r.grid),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_default_step_is_about_240_points_rounded_down() {
    for (range, step) in [
        (3_600, 15.0),
        (3 * 3_600, 45.0),
        (6 * 3_600, 60.0),
        (12 * 3_600, 180.0),
        (24 * 3_600, 300.0),
        (7 * 86_400, 2_400.0),
        (1_800, 5.0),
        (900, 3.0),
        (300, 1.0),
        (60, 1.0),
        (30, 0.1),
        (10, 0.05),
    ] {
        let got = crate::metrics::default_step(0, range * SEC) as f64 / SEC as f64;
        assert_eq!(got, step, "a range of {range} s");
    }
}

#[test]
fn times_are_seconds_nanoseconds_fractions_or_rfc3339() {
    assert_eq!(timestamp("1700000000"), Ok(NOW));
    assert_eq!(timestamp("1700000000000000000"), Ok(NOW));
    assert_eq!(timestamp("1700000000.5"), Ok(NOW + SEC / 2));
    assert_eq!(timestamp("2023-11-14T22:13:20Z"), Ok(NOW));
    // Thirteen digits are nanoseconds, as in Tempo: near 1970.
    assert_eq!(timestamp("1700000000000"), Ok(1_700_000_000_000));
    assert!(timestamp("yesterday").is_err());
    assert!(timestamp("-5").is_err());
}

#[test]
fn durations_parse_as_go_and_prometheus_write_them() {
    assert_eq!(
        tracedb_traceql::parse_go_duration("1m30s"),
        Some(90 * SEC as i64)
    );
    assert_eq!(
        tracedb_traceql::parse_go_duration("1.5h"),
        Some(5_400 * SEC as i64)
    );
    assert_eq!(
        tracedb_traceql::parse_go_duration("250ms"),
        Some(250_000_000)
    );
    assert_eq!(tracedb_traceql::parse_go_duration("-2us"), Some(-2_000));
    assert_eq!(tracedb_traceql::parse_go_duration("1d"), None);
    assert_eq!(tracedb_traceql::parse_go_duration("s"), None);
    assert_eq!(prometheus_duration("1h30m"), Ok(5_400 * SEC));
    assert_eq!(prometheus_duration("2d"), Ok(2 * 86_400 * SEC));
    assert_eq!(prometheus_duration("0"), Ok(0));
    assert!(prometheus_duration("30m1h").is_err());
    assert!(prometheus_duration("1.5h").is_err());
    assert_eq!(seconds_or_duration("30").ok(), Some(30 * SEC as i128));
    assert_eq!(seconds_or_duration("0.5").ok(), Some(SEC as i128 / 2));
    assert_eq!(seconds_or_duration("56s").ok(), Some(56 * SEC as i128));
}

#[test]
fn a_range_request_is_aligned_and_defaults_to_the_last_hour() {
    let r = range_request(&params(&[("q", "{} | rate()")]), NOW).expect("taken");
    // The last hour by 15 s: start (1699996400) aligned down to 1699996395
    // and one step earlier, end up to 1700000010.
    assert_eq!(r.grid.step, 15 * SEC);
    assert_eq!(r.grid.start, 1_699_996_380 * SEC);
    assert_eq!(r.grid.end, 1_700_000_010 * SEC);
    assert_eq!(r.max_exemplars, 100);
    let r = range_request(
        &params(&[
            ("q", "{} | rate() with(exemplars=7)"),
            ("start", "1700000001"),
            ("end", "1700000100"),
            ("step", "60s"),
            ("exemplars", "50"),
        ]),
        NOW,
    )
    .expect("taken");
    // As in Tempo's documentation: 1699999920 to 1700000100.
    assert_eq!(
        (r.grid.start, r.grid.end),
        (1_699_999_920 * SEC, 1_700_000_100 * SEC)
    );
    assert_eq!(r.max_exemplars, 7);
    let r = range_request(
        &params(&[
            ("query", "{} | rate()"),
            ("since", "15m"),
            ("exemplars", "0"),
        ]),
        NOW,
    )
    .expect("taken");
    assert_eq!(r.grid.step, 3 * SEC);
    assert_eq!(
        r.max_exemplars, 100,
        "exemplars=0 means the default, as in Tempo"
    );
}

#[test]
fn bad_requests_say_what_is_wrong() {
    let q = ("q", "{} | rate()");
    assert_eq!(
        refused(&[
            q,
            ("start", "1700000000"),
            ("end", "1700086400"),
            ("step", "1s")
        ]),
        "step of 1s is too small, minimum step for given range is 8.64s"
    );
    assert!(refused(&[q, ("step", "0")]).starts_with("step of 0s is too small"));
    assert!(refused(&[q, ("step", "-5")]).starts_with("step of -5s is too small"));
    assert_eq!(
        refused(&[q, ("start", "1700000100"), ("end", "1700000000")]),
        "end must be greater than start"
    );
    // Past Tempo's 24 h, a query that must read spans is refused; one the
    // metrics cells answer is taken up to 31 days.
    let spans = ("q", "{ span.http.url = \"/\" && duration > 1s } | rate()");
    let past_a_day = [
        ("start", "1699900000"),
        ("end", "1700000000"),
        ("step", "60"),
    ];
    assert!(refused(&[&[spans][..], &past_a_day].concat()).starts_with(
        "metrics query time range exceeds the maximum allowed duration of 24h0m0s (tracedb answers up to 744h0m0s"
    ));
    let week = range_request(
        &params(&[
            q,
            ("start", "1699395200"),
            ("end", "1700000000"),
            ("step", "3600"),
        ]),
        NOW,
    )
    .expect("a week of rate() is taken");
    assert_eq!(week.grid.len(), 170);
    assert_eq!(
        refused(&[
            q,
            ("start", "1690000000"),
            ("end", "1700000000"),
            ("step", "3600")
        ]),
        "metrics query time range exceeds the maximum allowed duration of 744h0m0s"
    );
    assert!(refused(&[q, ("start", "soon")]).starts_with("could not parse 'start' parameter"));
    assert!(refused(&[q, ("since", "1x")]).starts_with("could not parse 'since' parameter"));
    assert!(refused(&[q, ("step", "fast")]).starts_with("cannot parse \"fast\""));
    assert!(refused(&[("q", "{}")]).starts_with("not a metrics query"));
    assert!(refused(&[]).starts_with("q is required"));
    assert!(refused(&[("q", "{} | quantile_over_time(duration, 2)")]).contains("outside [0, 1]"));
}
