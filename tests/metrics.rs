//! `record_metrics`: every metric of the snapshot reaches the `metrics` recorder, as a
//! gauge or a counter, with its labels.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arenapool::{ArenaAlloc, Label};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// What was recorded: `name{labels}` to value, and the descriptions.
#[derive(Default)]
struct Seen {
    values: BTreeMap<String, f64>,
    described: BTreeMap<String, Unit>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Seen>>);

struct Handle {
    seen: Capture,
    key: String,
}

fn key_text(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Handle {
    fn set(&self, value: f64) {
        self.seen
            .0
            .lock()
            .unwrap()
            .values
            .insert(self.key.clone(), value);
    }
}

impl CounterFn for Handle {
    fn increment(&self, value: u64) {
        let mut seen = self.seen.0.lock().unwrap();
        *seen.values.entry(self.key.clone()).or_default() += value as f64;
    }
    fn absolute(&self, value: u64) {
        self.set(value as f64);
    }
}

impl GaugeFn for Handle {
    fn increment(&self, _: f64) {}
    fn decrement(&self, _: f64) {}
    fn set(&self, value: f64) {
        Handle::set(self, value);
    }
}

impl Recorder for Capture {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        let mut seen = self.0.lock().unwrap();
        seen.described
            .insert(key.as_str().to_string(), unit.expect("a unit"));
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.describe_counter(key, unit, help);
    }
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {
        panic!("no histogram");
    }
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Handle {
            seen: self.clone(),
            key: key_text(key),
        }))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(Handle {
            seen: self.clone(),
            key: key_text(key),
        }))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        panic!("no histogram");
    }
}

#[test]
fn every_metric_is_recorded_with_its_labels() {
    let ingest = Label::new("ingest").expect("a label");
    ingest.phase(|| drop(vec![1u8; 8 << 20]));
    let capture = Capture::default();
    let stats = arenapool::stats();
    metrics::with_local_recorder(&capture, || arenapool::record_metrics(&stats));
    let seen = capture.0.lock().unwrap();
    for metric in stats.metrics() {
        assert!(
            seen.described.contains_key(metric.name),
            "{} not described",
            metric.name
        );
        for (labels, value) in &metric.series {
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let key = format!("{}{{{}}}", metric.name, labels.join(","));
            let recorded = *seen
                .values
                .get(&key)
                .unwrap_or_else(|| panic!("{key} not recorded"));
            if metric.name.ends_with("_seconds_total") {
                assert_eq!(recorded, *value, "{key}");
            } else {
                assert_eq!(recorded, value.trunc(), "{key}");
            }
        }
    }
    assert_eq!(
        seen.values["arenapool_work_ended_total{work=phase,name=ingest}"],
        1.0
    );
    assert_eq!(
        seen.described["arenapool_jemalloc_resident_bytes"],
        Unit::Bytes
    );
    assert_eq!(
        seen.described["arenapool_work_give_back_seconds_total"],
        Unit::Seconds
    );
    assert!(seen.values["arenapool_jemalloc_resident_bytes{}"] > 0.0);
}
