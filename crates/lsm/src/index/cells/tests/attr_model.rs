//! Attribute cells against counting each span's counted attributes one by
//! one, on random spans.

use std::collections::BTreeMap;

use rand::{rngs::SmallRng, Rng, SeedableRng};

use super::*;

/// A cell of the attribute seconds: second, service, status, root, and
/// the attribute's scope and `KeyValue`.
type AttrCell = (u64, String, u32, bool, Vec<u8>);
/// Its spans, and its spans per duration exponent.
type Counted = (u64, BTreeMap<u8, u64>);

/// Spans carrying random subsets of eight counted attributes, in random
/// order, some twice (the first counts), some all eight, under two
/// resources: the attribute seconds count, for each span and counted
/// attribute, its first value's cell once, with its duration, as counting
/// them one by one does.
#[test]
fn attribute_seconds_count_each_spans_first_value_of_each_counted_attribute() {
    let names: Vec<String> = (0..8).map(|i| format!("span.a{i}")).collect();
    let mut list_names: Vec<&str> = names.iter().map(String::as_str).collect();
    list_names.push("resource.env");
    let list = Arc::new(CellAttributes::parse(list_names).expect("attributes"));
    let mut rng = SmallRng::seed_from_u64(7);
    let mut spans = Vec::new();
    let mut want: BTreeMap<AttrCell, Counted> = BTreeMap::new();
    for i in 0..4100u64 {
        let service = ["a", "b"][rng.random_range(0..2)];
        let status = [0, 2][rng.random_range(0..2)];
        let root = rng.random_bool(0.3);
        let start = rng.random_range(1..6) * NANOS + rng.random_range(0..NANOS);
        let duration = rng.random_range(2..1u64 << 20);
        let mut attrs = Vec::new();
        let mut first = BTreeMap::new();
        // The last spans carry all eight, alike in the first six.
        let picks: Vec<(u64, u64)> = if i >= 4000 {
            (0..8).map(|a| (a, if a < 6 { 0 } else { i % 3 })).collect()
        } else {
            (0..rng.random_range(0..12))
                .map(|_| (rng.random_range(0..8), rng.random_range(0..3)))
                .collect()
        };
        for (a, v) in picks {
            let value = kv(&format!("a{a}"), &int(v));
            first.entry(a).or_insert_with(|| value.clone());
            attrs.push(value);
        }
        let env = [kv("env", &string(["prod", "dev"][(i % 2) as usize]))];
        let s = with_attributes(
            span(Some(service), "GET", status, root, start, duration),
            &attrs,
            &env,
        );
        let counted = first
            .into_values()
            .map(|kv| [&[SPAN_SCOPE][..], &kv].concat())
            .chain([[&[RESOURCE_SCOPE][..], &env[0]].concat()]);
        for attr in counted {
            let cell = want
                .entry((second_of(start), service.into(), status as u32, root, attr))
                .or_default();
            cell.0 += 1;
            if let Some(exp) = duration_bucket(duration) {
                *cell.1.entry(exp).or_default() += 1;
            }
        }
        spans.push(s);
    }
    let mut b = CellsBuilder::new(list);
    b.add_all(&spans);
    let cells = b.finish_counted(|_| ()).expect("cells");
    let got: BTreeMap<_, _> = resolved(&cells, Family::Attr, 1)
        .into_iter()
        .map(|(second, key, n, durations)| {
            let root = key.is_root();
            // The service's `KeyValue`, its value last.
            let service = key.service.expect("a service");
            let service = if service.ends_with(b"a") { "a" } else { "b" }.to_string();
            let attr = key.attr.expect("an attribute").to_vec();
            let durations: BTreeMap<u8, u64> = durations.into_iter().collect();
            ((second, service, key.status, root, attr), (n, durations))
        })
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the attribute seconds differ from the spans'");
}
