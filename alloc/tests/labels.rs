//! Labels: one per name, and a bounded table whose limit is a clear error. Its own
//! binary, since it fills the process's table of labels.

use arenapool_alloc::{ArenaAlloc, Label, MAX_LABELS};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

#[test]
fn a_name_is_one_label_and_the_table_is_bounded() {
    let a = Label::new("ingest").expect("a label");
    assert_eq!(Label::new("ingest").expect("the same"), a);
    assert_eq!(a.name(), "ingest");
    assert_eq!(Label::all().collect::<Vec<_>>(), vec![a]);
    for i in 1..MAX_LABELS {
        Label::new(&format!("kind-{i}")).expect("room");
    }
    assert_eq!(Label::all().count(), MAX_LABELS);
    let e = Label::new("one-too-many").unwrap_err();
    assert!(e.is_too_many_labels(), "{e}");
    let message = e.to_string();
    assert!(
        message.contains("`one-too-many`") && message.contains(&MAX_LABELS.to_string()),
        "{message}"
    );
    // Names made before still resolve to their labels.
    assert_eq!(Label::new("ingest").expect("made before"), a);
}
