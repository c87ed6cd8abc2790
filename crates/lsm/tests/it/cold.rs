//! The cold tier against the `object_store` crate's in-memory store (the
//! server's tests run a real S3 server): cold files uploaded and verified,
//! their local copies dropped under the disk budget and their blocks read
//! back by ranged GETs through the cache; a new data directory restored
//! from the bucket; the lease; objects deleted only after the bucket's
//! manifest stops naming them; orphans of an upload cut short swept at
//! start.

use std::time::Duration;

use bytes::Bytes;
use tracedb_lsm::{
    cold::{Bucket, BucketConfig, ColdOptions},
    layout, Engine, EngineOptions, Error, TimeRange,
};

use crate::util::{files_on_disk, ids, small_tree, span_at, TestClock, SEC, T0};

fn bucket(name: &str) -> Bucket {
    Bucket::open(&BucketConfig {
        url: format!("memory://{name}/node-a"),
        endpoint: None,
        region: None,
    })
    .expect("bucket")
}

fn cold_tree(dir: &std::path::Path, clock: &TestClock, bucket: &Bucket) -> EngineOptions {
    let mut opts = small_tree(dir, clock);
    opts.retention = None;
    let mut cold = ColdOptions::new(bucket.clone());
    cold.cold_after = Duration::from_secs(60);
    cold.max_local_disk = Some(0);
    cold.block_cache_bytes = 1 << 20;
    // Passes run when the test asks.
    cold.interval = Duration::from_secs(3600);
    opts.cold = Some(cold);
    opts
}

/// Twelve traces of four spans, written a minute before "now" in three
/// flushes.
fn write_traces(engine: &Engine) {
    for part in 0..3u128 {
        let spans = (0..4u128)
            .flat_map(|t| (0..4).map(move |s| span_at(part * 4 + t + 1, s + 1, T0 - 120 * SEC + s)))
            .collect();
        engine.write_blocking(spans).expect("write");
        engine.flush().expect("flush");
    }
}

fn objects(bucket: &Bucket) -> Vec<String> {
    let mut names: Vec<String> = bucket
        .list("")
        .expect("list")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    names.sort();
    names
}

#[test]
fn cold_files_move_to_the_bucket_read_back_and_restore_a_new_node() {
    let (dir, restored_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let clock = TestClock::new();
    let bucket = bucket("move");
    let engine = Engine::open(cold_tree(dir.path(), &clock, &bucket)).expect("open");
    write_traces(&engine);
    let before: Vec<_> = (1..=12).map(|t| ids(&engine, t)).collect();
    assert!(before.iter().all(|spans| spans.len() == 4));
    let files = files_on_disk(dir.path());
    assert!(!files.is_empty());

    let pass = engine.cold_pass().expect("cold").expect("pass");
    assert_eq!(pass.uploaded, files.len(), "{pass:?}");
    assert_eq!(
        pass.dropped_local,
        files.len(),
        "a budget of 0 drops every copy: {pass:?}"
    );
    assert!(
        files_on_disk(dir.path()).is_empty(),
        "no .sst is left locally"
    );
    for id in &files {
        let head = layout::head_path(&layout::tables_dir(dir.path()), *id);
        assert!(head.exists(), "file {id} keeps its head locally");
        let names = objects(&bucket);
        assert!(names.contains(&layout::object_table(*id)), "{names:?}");
        assert!(names.contains(&layout::object_sidecar(*id)), "{names:?}");
    }
    assert!(objects(&bucket).contains(&"manifest".to_string()));
    let stats = engine.cold_stats().expect("stats");
    assert_eq!(
        (stats.remote_files, stats.local_copies),
        (files.len(), 0),
        "{stats:?}"
    );

    // Reads go to the bucket: one ranged GET per candidate file, then the cache.
    let gets = bucket.stats().gets;
    assert_eq!(ids(&engine, 5), before[4]);
    let first = bucket.stats().gets - gets;
    assert!(first >= 1 && first <= files.len() as u64, "{first} GETs");
    let gets = bucket.stats().gets;
    assert_eq!(ids(&engine, 5), before[4]);
    assert_eq!(
        bucket.stats().gets,
        gets,
        "the second read is served by the block cache"
    );
    for (t, want) in (1..=12).zip(&before) {
        assert_eq!(&ids(&engine, t), want, "trace {t}");
    }

    // A second node on the same prefix is refused while this one holds it.
    match Engine::open(cold_tree(restored_dir.path(), &clock, &bucket)) {
        Err(Error::LeaseHeld { .. }) => {}
        Err(e) => panic!("expected LeaseHeld, got {e}"),
        Ok(_) => panic!("a second node opened a held prefix"),
    }
    let services = engine.index(TimeRange::ALL).expect("index").services();
    assert!(!services.is_empty());
    engine.close().expect("close");
    drop(engine);

    // A new machine: an empty data directory restores from the bucket.
    let (gets, lists) = (bucket.stats().gets, bucket.stats().lists);
    let restored = Engine::open(cold_tree(restored_dir.path(), &clock, &bucket)).expect("restore");
    restored.cold_pass().expect("cold").expect("pass");
    assert_eq!(bucket.stats().lists, lists, "a restore lists nothing");
    assert_eq!(restored.stats().tables, files.len());
    for (t, want) in (1..=12).zip(&before) {
        assert_eq!(&ids(&restored, t), want, "trace {t} after restore");
    }
    assert!(bucket.stats().gets > gets);
    for id in &files {
        let sidecar = layout::sidecar_path(&layout::table_path(
            &layout::tables_dir(restored_dir.path()),
            *id,
        ));
        assert!(sidecar.exists(), "the sidecar of {id} came back");
    }
    let found = restored.index(TimeRange::ALL).expect("index").services();
    assert_eq!(
        found, services,
        "services are answered from the fetched sidecars"
    );
}

#[test]
fn dropped_remote_files_lose_their_objects_after_the_manifest_in_the_bucket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let bucket = bucket("drop");
    let mut opts = cold_tree(dir.path(), &clock, &bucket);
    opts.retention = Some(Duration::from_secs(3600));
    if let Some(c) = opts.cold.as_mut() {
        c.max_local_disk = None;
    }
    let engine = Engine::open(opts).expect("open");
    write_traces(&engine);
    let files = files_on_disk(dir.path());
    engine.cold_pass().expect("cold").expect("pass");
    assert_eq!(
        files_on_disk(dir.path()),
        files,
        "without a budget the local copies stay"
    );
    let uploaded = objects(&bucket);
    assert_eq!(
        uploaded.len(),
        2 * files.len() + 2,
        "files, sidecars, manifest, lease: {uploaded:?}"
    );

    clock.advance(2 * 3600 * SEC);
    assert_eq!(engine.apply_retention().expect("retention"), files.len());
    let pass = engine.cold_pass().expect("cold").expect("pass");
    assert_eq!(pass.deleted, files.len(), "{pass:?}");
    assert_eq!(
        objects(&bucket),
        vec!["lease".to_string(), "manifest".to_string()]
    );
    let manifest = bucket.get("manifest").expect("get").expect("manifest");
    let (state, _) =
        tracedb_lsm::manifest::parse(std::path::Path::new("manifest"), &manifest).expect("parse");
    assert!(state.files.is_empty(), "{:?}", state.files);
}

#[test]
fn an_upload_cut_short_before_its_edit_is_swept_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let bucket = bucket("sweep");
    let engine = Engine::open(cold_tree(dir.path(), &clock, &bucket)).expect("open");
    write_traces(&engine);
    engine.close().expect("close");
    drop(engine);
    // What a crash after the PUT and before the manifest edit leaves.
    bucket
        .put(&layout::object_table(999), Bytes::from_static(b"x"))
        .expect("put");
    bucket
        .put(&layout::object_sidecar(999), Bytes::from_static(b"x"))
        .expect("put");
    let engine = Engine::open(cold_tree(dir.path(), &clock, &bucket)).expect("reopen");
    let pass = engine.cold_pass().expect("cold").expect("pass");
    assert_eq!(pass.orphans, 2, "{pass:?}");
    let names = objects(&bucket);
    assert!(!names.contains(&layout::object_table(999)), "{names:?}");
    assert_eq!(
        pass.uploaded,
        files_on_disk(dir.path()).len().max(pass.uploaded)
    );
    let again = engine.cold_pass().expect("cold").expect("pass");
    assert_eq!(again.orphans, 0, "the listing runs once per start");
}

#[test]
fn a_compaction_reads_remote_files_and_its_inputs_leave_the_bucket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let bucket = bucket("compact");
    let engine = Engine::open(cold_tree(dir.path(), &clock, &bucket)).expect("open");
    write_traces(&engine);
    let before: Vec<_> = (1..=12).map(|t| ids(&engine, t)).collect();
    let pass = engine.cold_pass().expect("cold").expect("pass");
    assert!(
        pass.uploaded >= 3 && files_on_disk(dir.path()).is_empty(),
        "{pass:?}"
    );
    let remote = objects(&bucket);

    // Level 0's three remote files merge: read back whole from the bucket.
    assert!(engine.compact().expect("compact") >= 1);
    for (t, want) in (1..=12).zip(&before) {
        assert_eq!(&ids(&engine, t), want, "trace {t} after the merge");
    }
    assert!(
        !files_on_disk(dir.path()).is_empty(),
        "the merge's outputs are local"
    );
    let pass = engine.cold_pass().expect("cold").expect("pass");
    assert!(pass.deleted >= 3, "the inputs' objects go: {pass:?}");
    let now = objects(&bucket);
    for name in remote.iter().filter(|n| n.starts_with("tables/")) {
        assert!(!now.contains(name), "{name} outlived its file: {now:?}");
    }
    assert!(pass.uploaded >= 1, "the outputs go cold in turn: {pass:?}");
    for (t, want) in (1..=12).zip(&before) {
        assert_eq!(&ids(&engine, t), want, "trace {t} with the outputs remote");
    }
}

#[test]
fn each_tenant_has_a_prefix_a_restore_finds_it_and_a_delete_empties_it() {
    use tracedb_lsm::{delete_tenant_with, Stores};
    use tracedb_proto::tenant::TenantId;

    let (dir, restored_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let clock = TestClock::new();
    let bucket = bucket("tenants");
    let acme = TenantId::new("acme").expect("tenant");
    let stores = Stores::open(cold_tree(dir.path(), &clock, &bucket), true).expect("open");
    let engine = stores.get_or_create(&acme).expect("acme's store");
    write_traces(&engine);
    let before: Vec<_> = (1..=12).map(|t| ids(&engine, t)).collect();
    engine.cold_pass().expect("cold").expect("pass");
    let names = objects(&bucket);
    assert!(names.contains(&"tenants.txt".to_string()), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("tenants/acme/tables/")),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("tables/")),
        "acme's files are under its prefix: {names:?}"
    );
    stores.close().expect("close");
    drop((engine, stores));

    let stores =
        Stores::open(cold_tree(restored_dir.path(), &clock, &bucket), true).expect("restore");
    let engine = stores
        .get(&acme)
        .expect("acme is restored from tenants.txt");
    for (t, want) in (1..=12).zip(&before) {
        assert_eq!(&ids(&engine, t), want, "acme's trace {t} after the restore");
    }
    stores.close().expect("close");
    drop((engine, stores));

    let deleted = delete_tenant_with(restored_dir.path(), &acme, Some(&bucket)).expect("delete");
    assert!(deleted.objects >= 4, "{deleted:?}");
    let names = objects(&bucket);
    assert!(
        !names.iter().any(|n| n.starts_with("tenants/acme/")),
        "{names:?}"
    );
    let listed = bucket
        .get("tenants.txt")
        .expect("get")
        .expect("tenants.txt");
    assert!(listed.is_empty(), "{listed:?}");
}
