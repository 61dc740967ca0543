//! jemalloc's settings and its background threads, each read in a process of its own
//! (jemalloc reads its settings once, as it starts).
use std::process::Command;

use arenapool_alloc::{jemalloc_settings_given, stop_background_threads};

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

/// The variable jemalloc (as `tikv-jemalloc-sys` builds it) reads its settings from.
const SETTINGS_ENV: &str = "_RJEM_MALLOC_CONF";

/// The child's part, run only by [`child_with`]: prints whether settings were given,
/// then whether background threads ran when it stopped them.
#[test]
#[ignore = "run in a child process by the other tests"]
fn child_prints_settings_and_threads() {
    let given = jemalloc_settings_given();
    println!("given: {given}, ran: {:?}", stop_background_threads());
}

/// Runs [`child_prints_settings_and_threads`] in a child with `SETTINGS_ENV` set to
/// `value` (removed for `None`), and returns what it printed.
fn child_with(value: Option<&str>) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args([
        "--exact",
        "child_prints_settings_and_threads",
        "--ignored",
        "--nocapture",
    ]);
    match value {
        Some(value) => child.env(SETTINGS_ENV, value),
        None => child.env_remove(SETTINGS_ENV),
    };
    let out = child.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find(|l| l.starts_with("given: "))
        .unwrap_or_else(|| panic!("nothing printed: {stdout}"))
        .to_owned()
}

#[test]
fn without_settings_no_background_thread_runs() {
    if std::path::Path::new("/etc/_rjem_malloc.conf").exists() {
        eprintln!("skipped: this machine gives jemalloc settings in /etc/_rjem_malloc.conf");
        return;
    }
    assert_eq!(child_with(None), "given: false, ran: Ok(false)");
}

#[test]
fn settings_in_the_environment_are_seen_and_their_threads_stopped() {
    assert_eq!(
        child_with(Some("background_thread:true")),
        "given: true, ran: Ok(true)"
    );
    // Settings that start no thread are settings all the same.
    assert_eq!(
        child_with(Some("dirty_decay_ms:500")),
        "given: true, ran: Ok(false)"
    );
}
