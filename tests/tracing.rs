//! With the feature `tracing`: a span for each phase and pool job, with what its end
//! gave back as fields.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arenapool::{ArenaAlloc, ArenaPool, Label};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// Each span made: its name and fields.
#[derive(Clone, Default)]
struct Capture(Arc<Spans>);

#[derive(Default)]
struct Spans {
    next: AtomicU64,
    spans: Mutex<BTreeMap<u64, (&'static str, Fieldset)>>,
}

/// A span's fields, by name, with their values as `Debug` shows them.
type Fieldset = BTreeMap<String, String>;

struct Fields<'a>(&'a mut Fieldset);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.0.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        self.0
            .spans
            .lock()
            .unwrap()
            .insert(id, (span.metadata().name(), fields));
        Id::from_u64(id)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut spans = self.0.spans.lock().unwrap();
        let (_, fields) = spans.get_mut(&span.into_u64()).expect("a span");
        values.record(&mut Fields(fields));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn phases_and_jobs_have_spans_with_their_figures() {
    let capture = Capture::default();
    let pool = ArenaPool::builder()
        .num_threads(1)
        .label(Label::new("query").expect("a label"))
        .build()
        .expect("a pool");
    tracing::subscriber::with_default(capture.clone(), || {
        Label::new("ingest")
            .expect("a label")
            .phase(|| drop((0..16).map(|_| vec![1u8; 1 << 20]).collect::<Vec<_>>()));
        pool.run(|| drop((0..16).map(|_| vec![1u8; 1 << 20]).collect::<Vec<_>>()));
    });
    let spans = capture.0.spans.lock().unwrap();
    let find = |work: &str| {
        spans
            .values()
            .find(|(name, fields)| *name == "arenapool" && fields["work"] == format!("{work:?}"))
            .unwrap_or_else(|| panic!("no span of work {work}"))
            .1
            .clone()
    };
    let phase = find("phase");
    assert_eq!(phase["name"], "\"ingest\"");
    let returned: u64 = phase["returned_bytes"].parse().expect("a number");
    assert!(returned >= 12 << 20, "{phase:?}");
    assert!(phase.contains_key("give_back_seconds") && phase.contains_key("run_seconds"));
    let job = find("job");
    assert_eq!(job["name"], "\"query\"");
    assert!(
        job.contains_key("returned_bytes") && job.contains_key("run_seconds"),
        "{job:?}"
    );
}
