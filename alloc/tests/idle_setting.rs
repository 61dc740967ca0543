//! The idle return's setting: its default, `set_idle_return`, and the environment
//! variable, each read in a process of its own (the setting is the process's).
use std::process::Command;
use std::time::Duration;

use arenapool_alloc::{idle_return, set_idle_return, IDLE_RETURN_ENV};

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

/// The child's part, run only by [`child_with`]: prints the setting it finds.
#[test]
#[ignore = "run in a child process by the other tests"]
fn child_prints_the_setting() {
    println!("setting: {:?}", idle_return());
}

/// Runs [`child_prints_the_setting`] in a child with `IDLE_RETURN_ENV` set to `value`
/// and returns what it printed, and its standard error.
fn child_with(value: &str) -> (String, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_prints_the_setting",
            "--ignored",
            "--nocapture",
        ])
        .env(IDLE_RETURN_ENV, value)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("setting: "))
        .unwrap_or_else(|| panic!("no setting printed: {stdout}"));
    (
        line.to_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_environment_sets_the_default() {
    assert_eq!(child_with("2s").0, "Some(2s)");
    assert_eq!(child_with("250ms").0, "Some(250ms)");
    assert_eq!(child_with("750").0, "Some(750ms)");
    assert_eq!(child_with("off").0, "None");
    let (setting, stderr) = child_with("soon");
    assert_eq!(setting, "Some(1s)");
    assert!(
        stderr.contains("ARENAPOOL_IDLE_RETURN=\"soon\" is not `off` or a delay"),
        "{stderr}"
    );
    let (setting, _) = child_with("0");
    assert_eq!(setting, "Some(1s)", "0 is refused, the default kept");
}

#[test]
fn set_idle_return_changes_it() {
    // One test changes this process's setting; the others read theirs in children.
    if std::env::var_os(IDLE_RETURN_ENV).is_none() {
        assert_eq!(idle_return(), Some(Duration::from_secs(1)));
    }
    set_idle_return(None);
    assert_eq!(idle_return(), None);
    set_idle_return(Some(Duration::from_millis(300)));
    assert_eq!(idle_return(), Some(Duration::from_millis(300)));
    set_idle_return(Some(Duration::ZERO));
    assert_eq!(idle_return(), Some(Duration::from_millis(1)));
    set_idle_return(Some(Duration::from_secs(1)));
    assert_eq!(idle_return(), Some(Duration::from_secs(1)));
}
