//! What the examples share: the report of one run, and running each mode in a child
//! process of its own, so that no mode inherits another's memory.
use std::process::Command;

use arenapool::Bytes;

/// Keeps a tenth of the labels (as the field report's program does), drops the
/// results, and prints RSS before, after the phase and after dropping, with `detail`
/// (a time, say) beside the checksum. (Only the S1 examples report this way.)
#[allow(dead_code)]
pub fn report(
    name: &str,
    before: usize,
    results: Vec<Vec<f64>>,
    mut labels: Vec<String>,
    detail: &str,
) {
    let after_run = arenapool::rss();
    labels.retain(|l| l.ends_with('0'));
    let checksum: f64 = results.iter().map(|r| r[r.len() - 1]).sum();
    drop(results);
    let after_drop = arenapool::rss();
    println!(
        "{name:<28} before {:>10}   after the phase {:>10}   after dropping {:>10}   ({detail}kept {} labels, checksum {checksum})",
        Bytes(before).to_string(),
        Bytes(after_run).to_string(),
        Bytes(after_drop).to_string(),
        labels.len(),
    );
}

/// Runs `run(mode)` if this process was started with one of `modes`; otherwise prints
/// `title` and starts this program once per mode, one after the other.
pub fn run_modes(title: &str, modes: &[&str], run: impl Fn(&str)) {
    if let Some(mode) = std::env::args()
        .nth(1)
        .filter(|m| modes.contains(&m.as_str()))
    {
        return run(&mode);
    }
    println!("{title}\n");
    let me = std::env::current_exe().expect("path of this example");
    for mode in modes {
        let status = Command::new(&me).arg(mode).status().expect("run a child");
        assert!(status.success(), "{mode} run failed: {status}");
    }
}
