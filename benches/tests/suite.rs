//! The suite end to end: the runner binary starts the real contender binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const CONTENDERS: [&str; 5] = [
    "glibc",
    "jemalloc",
    "jemalloc-tuned",
    "mimalloc",
    "arenapool",
];

fn out_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn runner(args: &[&str], out: &Path) -> Output {
    let runner = Path::new(env!("CARGO_BIN_EXE_arenapool-bench"));
    let mut command = Command::new(runner);
    command.args(args).arg("--out").arg(out);
    if !args.contains(&"--bin-dir") {
        // Cargo has built every binary of the package next to the runner.
        command.arg("--bin-dir").arg(runner.parent().unwrap());
    }
    let output = command.output().expect("the runner starts");
    assert!(
        output.status.success(),
        "runner failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn results(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json written");
    serde_json::from_str(&text).expect("results.json is valid JSON")
}

fn mib(v: &Value) -> f64 {
    v.as_u64().expect("a byte count") as f64 / (1 << 20) as f64
}

/// The `--quick` scale, as a user runs it, on one workload that is small at that scale.
#[test]
fn quick_run_of_one_workload_per_contender() {
    let out = out_dir("quick");
    runner(&["--quick", "--only", "large-blocks"], &out);
    let r = results(&out);
    assert_eq!(r["scale"], "quick");
    let summaries = r["summaries"].as_array().unwrap();
    assert_eq!(summaries.len(), CONTENDERS.len());
    for (s, name) in summaries.iter().zip(CONTENDERS) {
        assert_eq!(s["workload"], "large-blocks");
        assert_eq!(s["contender"], name);
        assert_eq!(s["status"], "ok", "{s}");
        assert_eq!(s["checksum_agrees"], true);
        assert!(mib(&s["peak_rss"]) > mib(&s["rss_start"]), "{s}");
    }
    let chart = std::fs::read_to_string(out.join("charts/rss-large-blocks.svg")).unwrap();
    assert!(chart.starts_with("<svg") && chart.contains("arenapool"));
}

#[test]
fn tiny_run_of_one_workload_writes_results_table_and_charts() {
    let out = out_dir("one-workload");
    let output = runner(&["--tiny", "--only", "s1-phase"], &out);
    let stdout = String::from_utf8_lossy(&output.stdout);
    for c in CONTENDERS {
        assert!(stdout.contains(c), "table lacks {c}:\n{stdout}");
    }

    let r = results(&out);
    assert_eq!(r["scale"], "tiny");
    let summaries = r["summaries"].as_array().unwrap();
    assert_eq!(summaries.len(), CONTENDERS.len());
    for (s, name) in summaries.iter().zip(CONTENDERS) {
        assert_eq!(s["workload"], "s1-phase");
        assert_eq!(s["contender"], name);
        assert_eq!(s["status"], "ok", "{s}");
        assert_eq!(s["checksum_agrees"], true);
        assert_eq!(s["after_phase"], "dropped");
        assert!(s["time_s"].as_f64().unwrap() > 0.0);
        assert!(mib(&s["peak_rss"]) >= mib(&s["rss_start"]));
        let phases: Vec<&str> = s["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[0].as_str().unwrap())
            .collect();
        assert_eq!(phases, ["start", "run", "dropped"]);
    }
    assert_eq!(summaries[1]["ratio_to_jemalloc"], 1.0);
    let arenapool = &summaries[4];
    assert!(
        mib(&arenapool["rss_after"]) <= mib(&arenapool["rss_start"]) + 16.0,
        "{arenapool}"
    );

    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), CONTENDERS.len());
    for run in runs {
        assert!(!run["timeline"].as_array().unwrap().is_empty(), "{run}");
        assert!(run["user_s"].as_f64().unwrap() + run["sys_s"].as_f64().unwrap() > 0.0);
    }

    let chart = std::fs::read_to_string(out.join("charts/rss-s1-phase.svg")).unwrap();
    assert!(chart.starts_with("<svg"));
    for c in CONTENDERS {
        assert!(
            chart.contains(&format!(">\n{c}\n<")),
            "chart legend lacks {c}"
        );
    }
    let retained = std::fs::read_to_string(out.join("charts/retained.svg")).unwrap();
    assert!(retained.starts_with("<svg") && retained.contains("s1-phase"));
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| arenapool |"));
}

#[test]
fn every_workload_runs_under_every_contender_with_equal_checksums() {
    let out = out_dir("all-workloads");
    runner(&["--tiny", "--threads", "2"], &out);
    let r = results(&out);
    let summaries = r["summaries"].as_array().unwrap();
    assert_eq!(summaries.len(), 8 * CONTENDERS.len());
    for s in summaries {
        assert_eq!(s["status"], "ok", "{s}");
        assert_eq!(s["checksum_agrees"], true, "{s}");
        assert!(s["phases"].as_array().unwrap().len() >= 2);
    }
    for info in r["workloads"].as_array().unwrap() {
        let name = info["name"].as_str().unwrap();
        assert!(
            out.join(format!("charts/rss-{name}.svg")).is_file(),
            "{name}"
        );
    }
}

/// A contender that dies is reported with what killed it, not left out.
#[test]
fn crashed_and_out_of_memory_contenders_are_reported() {
    let bins = out_dir("fake-bins");
    std::fs::create_dir_all(&bins).unwrap();
    let real = Path::new(env!("CARGO_BIN_EXE_bench-jemalloc"));
    std::os::unix::fs::symlink(real, bins.join("bench-jemalloc")).unwrap();
    let script = |name: &str, body: &str| {
        let path = bins.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    script("bench-glibc", "echo 'PHASE start 4096 0'; kill -9 $$");
    script(
        "bench-mimalloc",
        "echo 'PHASE start 4096 0'; echo 'memory allocation of 1048576 bytes failed' >&2; exit 134",
    );

    let out = out_dir("crashes");
    let output = runner(
        &[
            "--tiny",
            "--only",
            "s1-phase",
            "--contenders",
            "glibc,jemalloc,mimalloc",
            "--bin-dir",
            bins.to_str().unwrap(),
        ],
        &out,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("KILLED (SIGKILL"), "{stdout}");
    assert!(stdout.contains("OUT OF MEMORY"), "{stdout}");

    let r = results(&out);
    let summaries = r["summaries"].as_array().unwrap();
    assert_eq!(summaries.len(), 3);
    assert_eq!(summaries[0]["contender"], "glibc");
    assert!(summaries[0]["status"]
        .as_str()
        .unwrap()
        .starts_with("KILLED"));
    assert_eq!(summaries[0]["ok_runs"], 0);
    assert!(summaries[0]["time_s"].is_null());
    assert_eq!(summaries[1]["status"], "ok");
    assert_eq!(summaries[2]["status"], "OUT OF MEMORY");
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs[0]["status"]["kind"], "signal");
    assert_eq!(runs[0]["status"]["signal"], 9);
    assert_eq!(runs[2]["status"]["kind"], "exit");
    assert_eq!(runs[2]["status"]["code"], 134);
}
