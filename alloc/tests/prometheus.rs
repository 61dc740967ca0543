//! The exposition: parsed by a Prometheus text-format parser, every metric with its
//! help, its type and a unit suffix, and the figures those of the snapshot.

use std::collections::BTreeSet;

use arenapool_alloc::{stats, write_prometheus, ArenaAlloc, Label};
use prometheus_parse::{Scrape, Value};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

fn scrape() -> (String, Scrape) {
    let mut text = String::new();
    write_prometheus(&stats(), &mut text).expect("a String takes any text");
    let lines = text.lines().map(|line| Ok(line.to_string()));
    let scrape = Scrape::parse(lines).expect("the text parses");
    (text, scrape)
}

#[test]
fn every_metric_parses_with_help_type_and_unit() {
    let label = Label::new("ingest").expect("a label");
    label.phase(|| drop(vec![1u8; 4 << 20]));
    let (text, scrape) = scrape();
    assert!(scrape.samples.len() > 40, "{text}");
    let names: BTreeSet<&str> = scrape.samples.iter().map(|s| s.metric.as_str()).collect();
    for name in &names {
        assert!(name.starts_with("arenapool_"), "{name}");
        assert!(
            name.ends_with("_bytes")
                || name.ends_with("_seconds_total")
                || name.ends_with("_total"),
            "{name} has no unit suffix"
        );
        assert!(scrape.docs.contains_key(*name), "{name} has no HELP");
        let typed = text.contains(&format!("# TYPE {name} gauge\n"))
            || text.contains(&format!("# TYPE {name} counter\n"));
        assert!(typed, "{name} has no TYPE");
    }
    for sample in &scrape.samples {
        let counter = sample.metric.ends_with("_total");
        match sample.value {
            Value::Counter(v) => assert!(counter && v >= 0.0, "{}", sample.metric),
            Value::Gauge(v) => assert!(!counter && v >= 0.0, "{}", sample.metric),
            _ => panic!("{} is neither a counter nor a gauge", sample.metric),
        }
    }
    // The labelled phase, under its name.
    let ended = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "arenapool_work_ended_total"
                && s.labels.get("work") == Some("phase")
                && s.labels.get("name") == Some("ingest")
        })
        .expect("the label's series");
    assert_eq!(ended.value, Value::Counter(1.0));
}

#[test]
fn resident_by_kind_is_the_snapshot_s() {
    let (_, scrape) = scrape();
    let sum = |metric: &str| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == metric)
            .map(|s| match s.value {
                Value::Gauge(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    let kinds = sum("arenapool_arena_resident_bytes");
    let jemalloc = sum("arenapool_jemalloc_resident_bytes");
    assert!(jemalloc > 0.0);
    assert_eq!(kinds, jemalloc);
}
