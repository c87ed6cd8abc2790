//! Tenants' limits: a flood past one tenant's rate or memory share leaves
//! the others alone and the limits reload; a tenant's retention drops its
//! own files; spans past a tenant's largest trace are refused in partial
//! success.

use super::*;

/// One export of `spans` spans in one trace as `who`.
async fn export(server: &Server, who: &str, t: u128, spans: u64) -> Result<(), tonic::Status> {
    let mut ingest = server.ingest().await;
    let request = crate::harness::request(&format!("svc-{who}"), &[t], spans);
    ingest.export(tenant(request, who)).await.map(drop)
}

fn metric_or_zero(server: &Server, sample: &str) -> f64 {
    let text = String::from_utf8(get(server, "/metrics", None).body).expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().expect("a number"))
}

/// Waits (at most `secs`) until `f` holds.
async fn eventually(secs: u64, what: &str, mut f: impl AsyncFnMut() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !f().await {
        assert!(
            std::time::Instant::now() < until,
            "not within {secs} s: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_flood_past_its_limits_leaves_other_tenants_alone_and_limits_reload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = dir.path().join("overrides.toml");
    let limited = "[tenants.flood]\nrate_spans = 2000\n\n[tenants.hog]\nmemory_share = 0.01\n";
    std::fs::write(&overrides, limited).expect("write");
    let server = Server::start_with(
        &dir.path().join("data"),
        &[
            "--tenancy",
            "header",
            "--max-memory",
            "256MiB",
            "--overrides",
            overrides.to_str().expect("UTF-8"),
        ],
    );

    // A flood past its rate is refused retryably; the steady tenant beside
    // it is never refused.
    let (mut flood_ok, mut flood_refused) = (0, 0);
    for i in 0..30u128 {
        match export(&server, "flood", 0xf100 + i, 500).await {
            Ok(()) => flood_ok += 1,
            Err(e) => {
                assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
                assert!(
                    e.message().contains("over its limit of 2000 spans"),
                    "{e:?}"
                );
                let info = tracedb_proto::google::rpc::Status::decode(e.details())
                    .expect("status details");
                assert!(
                    info.details
                        .iter()
                        .any(|d| d.type_url.ends_with("RetryInfo")),
                    "retryable: {info:?}"
                );
                flood_refused += 1;
            }
        }
        export(&server, "steady", 0x5700 + i, 20)
            .await
            .expect("the steady tenant is never refused");
    }
    assert!(
        flood_ok >= 1 && flood_refused >= 10,
        "{flood_ok} accepted, {flood_refused} refused"
    );

    // A tenant whose unflushed spans fill its share of the memory budget
    // (1% of 192 MiB) is refused; the others are not.
    let mut hog_refused = None;
    let mut steady_beside_hog = 0;
    for i in 0..20u128 {
        if let Err(e) = export(&server, "hog", 0x4000 + i, 4000).await {
            hog_refused = Some(e);
            break;
        }
        export(&server, "steady", 0x5800 + i, 20)
            .await
            .expect("steady");
        steady_beside_hog += 1;
    }
    let e = hog_refused.expect("the hog is refused once its share is full");
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("share of the memory budget"), "{e:?}");
    export(&server, "steady", 0x5900, 20)
        .await
        .expect("steady after the hog");

    // Counted per tenant.
    let steady_spans = 20 * (30 + 1 + steady_beside_hog);
    assert_eq!(
        metric_or_zero(
            &server,
            "tracedb_tenant_spans_accepted_total{tenant=\"steady\"}"
        ),
        f64::from(steady_spans)
    );
    assert_eq!(
        metric_or_zero(
            &server,
            "tracedb_tenant_requests_refused_total{tenant=\"steady\"}"
        ),
        0.0
    );
    assert_eq!(
        metric_or_zero(
            &server,
            "tracedb_tenant_requests_refused_total{tenant=\"flood\"}"
        ),
        f64::from(flood_refused)
    );

    // A bad file keeps the limits in force, and says so.
    std::fs::write(&overrides, "[tenants.flood]\nrate_spans = \"many\"\n").expect("write");
    eventually(10, "the bad file refused", async || {
        metric_or_zero(&server, "tracedb_overrides_reload_failures_total") == 1.0
    })
    .await;
    assert!(server.log_text().contains("overrides file refused"));
    let mut refused = 0;
    for i in 0..10u128 {
        refused += u32::from(export(&server, "flood", 0xf200 + i, 1000).await.is_err());
    }
    assert!(refused >= 5, "the old limit holds: {refused} of 10 refused");

    // A good one applies without a restart.
    std::fs::write(&overrides, "[tenants.hog]\nmemory_share = 0.01\n").expect("write");
    eventually(10, "the flood's limit lifted", async || {
        export(&server, "flood", 0xf300, 1000).await.is_ok()
            && export(&server, "flood", 0xf301, 1000).await.is_ok()
            && export(&server, "flood", 0xf302, 1000).await.is_ok()
    })
    .await;
    for i in 0..10u128 {
        export(&server, "flood", 0xf400 + i, 1000)
            .await
            .expect("no limit now");
    }
}

#[tokio::test]
async fn a_tenants_retention_drops_its_files_and_not_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = dir.path().join("overrides.toml");
    std::fs::write(&overrides, "[defaults]\nretention = \"2h\"\n").expect("write");
    let server = Server::start_with(
        &dir.path().join("data"),
        &[
            "--tenancy",
            "header",
            "--flush-age-secs",
            "1",
            "--overrides",
            overrides.to_str().expect("UTF-8"),
        ],
    );
    // Spans half an hour old, in both tenants, flushed to files.
    let old = now() - 30 * 60 * SEC;
    for (who, t) in [("short", 0x5110u128), ("long", 0x1010)] {
        let r = trace(
            t,
            1,
            &format!("{who}-front"),
            &format!("{who}-db"),
            "/r",
            old,
        );
        server
            .ingest()
            .await
            .export(tenant(r, who))
            .await
            .expect("export");
    }
    for who in ["short", "long"] {
        let files = format!("tracedb_sorted_files{{tenant=\"{who}\"}}");
        eventually(30, "flushed", async || {
            metric_or_zero(&server, &files) >= 1.0
        })
        .await;
    }
    assert_eq!(
        span_ids(&server, 0x5110, "short").await.expect("kept"),
        [1, 2].into()
    );

    // Ten minutes for one tenant: its files go at once, the other's stay.
    std::fs::write(
        &overrides,
        "[defaults]\nretention = \"2h\"\n\n[tenants.short]\nretention = \"10m\"\n",
    )
    .expect("write");
    let dropped = "tracedb_retention_dropped_files_total{tenant=\"short\"}";
    eventually(15, "short's files dropped", async || {
        metric_or_zero(&server, dropped) >= 1.0
    })
    .await;
    assert_eq!(
        metric_or_zero(&server, "tracedb_sorted_files{tenant=\"short\"}"),
        0.0
    );
    assert!(metric_or_zero(&server, "tracedb_sorted_files{tenant=\"long\"}") >= 1.0);
    assert_eq!(
        metric_or_zero(
            &server,
            "tracedb_retention_dropped_files_total{tenant=\"long\"}"
        ),
        0.0
    );
    let gone = span_ids(&server, 0x5110, "short")
        .await
        .expect_err("expired");
    assert_eq!(gone.code(), Code::NotFound);
    assert_eq!(
        span_ids(&server, 0x1010, "long").await.expect("kept"),
        [1, 2].into()
    );
    let sst = |who: &str| {
        std::fs::read_dir(dir.path().join("data/tenants").join(who).join("tables"))
            .expect("tables")
            .filter(|e| {
                e.as_ref()
                    .expect("entry")
                    .path()
                    .extension()
                    .is_some_and(|x| x == "sst")
            })
            .count()
    };
    assert_eq!(sst("short"), 0);
    assert!(sst("long") >= 1);
}

#[tokio::test]
async fn spans_past_a_tenants_largest_trace_are_refused_in_partial_success() {
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = dir.path().join("overrides.toml");
    std::fs::write(&overrides, "[tenants.small]\nmax_trace_bytes = \"4KiB\"\n").expect("write");
    let server = Server::start_with(
        &dir.path().join("data"),
        &[
            "--tenancy",
            "header",
            "--overrides",
            overrides.to_str().expect("UTF-8"),
        ],
    );
    // One trace of 40 spans (a few hundred bytes each) to each tenant.
    let mut ingest = server.ingest().await;
    let mut accepted = std::collections::HashMap::new();
    for who in ["small", "large"] {
        let request = crate::harness::request("svc", &[0x1a76e], 40);
        let response = ingest
            .export(tenant(request, who))
            .await
            .expect("accepted, maybe in part")
            .into_inner();
        let rejected = response.partial_success.map_or(0, |p| {
            if p.rejected_spans > 0 {
                assert!(
                    p.error_message.contains("largest trace of 4096 bytes"),
                    "{p:?}"
                );
            }
            p.rejected_spans
        });
        accepted.insert(who, 40 - rejected);
    }
    assert!(
        (1..40).contains(&accepted["small"]),
        "small kept part of its trace: {accepted:?}"
    );
    assert_eq!(accepted["large"], 40, "large has no limit");
    // What was acknowledged is stored; what was refused is not.
    let small = span_ids(&server, 0x1a76e, "small").await.expect("stored");
    assert_eq!(small.len() as i64, accepted["small"]);
    let large = span_ids(&server, 0x1a76e, "large").await.expect("stored");
    assert_eq!(large.len(), 40);
    assert_eq!(
        metric_or_zero(
            &server,
            "tracedb_spans_rejected_total{reason=\"trace_too_large\"}"
        ),
        (40 - accepted["small"]) as f64
    );
    // A later request of the same trace adds nothing past the limit.
    let more = crate::harness::request("svc", &[0x1a76e], 2);
    let response = ingest
        .export(tenant(more, "small"))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(response.partial_success.map(|p| p.rejected_spans), Some(2));
}
