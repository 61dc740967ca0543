//! The suite end to end: the runner binary starts the real contender binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const CONTENDERS: [&str; 16] = [
    "glibc",
    "glibc-trim",
    "glibc-trim64k",
    "jemalloc",
    "jemalloc-tuned",
    "jemalloc-bg500",
    "jemalloc-thp",
    "mimalloc",
    "mimalloc-purge0",
    "rpmalloc",
    "snmalloc",
    "tcmalloc",
    "arenapool",
    "arenapool-warm",
    "arenapool-huge",
    "arenapool-phase",
];

/// The contenders this build has; the others are optional features.
fn built(name: &str) -> bool {
    name != "tcmalloc" || cfg!(feature = "tcmalloc")
}

const WORKLOADS: usize = 18;

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
    v.as_f64().expect("a byte count") / (1 << 20) as f64
}

/// The summary of contender `name` among `summaries` of one workload.
fn summary_of<'a>(summaries: &'a [Value], name: &str) -> &'a Value {
    summaries
        .iter()
        .find(|s| s["contender"] == name)
        .unwrap_or_else(|| panic!("no summary of {name}"))
}

/// Checks one summary of a contender that ran (or, not built, was reported).
fn check_summary(s: &Value) {
    let name = s["contender"].as_str().unwrap();
    if built(name) {
        assert_eq!(s["status"], "ok", "{s}");
        assert_eq!(s["checksum_agrees"], true, "{s}");
        for figure in [
            "time_s",
            "peak_rss",
            "rss_after",
            "time_ratio",
            "peak_anon_huge",
            "minor_faults",
        ] {
            let f = &s[figure];
            let (lo, med, hi) = (f["min"].as_f64(), f["median"].as_f64(), f["max"].as_f64());
            assert!(lo <= med && med <= hi && lo.is_some(), "{figure}: {s}");
        }
    } else {
        assert_eq!(s["ok_runs"], 0, "{s}");
        assert_eq!(s["available"], false, "{s}");
        let status = s["status"].as_str().unwrap();
        assert!(status.starts_with("not available"), "{s}");
        assert!(status.contains("--features"), "{s}");
    }
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
        check_summary(s);
        if built(name) {
            assert!(
                mib(&s["peak_rss"]["median"]) > mib(&s["rss_start"]["median"]),
                "{s}"
            );
        }
    }
    // Every block is large and freed inside the job or phase: its pages go back at the end.
    for name in ["arenapool", "arenapool-phase"] {
        let s = summary_of(summaries, name);
        assert!(
            mib(&s["rss_after"]["median"]) <= mib(&s["rss_start"]["median"]) + 16.0,
            "{s}"
        );
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
    assert!(stdout.contains("Across every workload"), "{stdout}");
    // Without a terminal for the progress bar, progress is a line per workload.
    let runs = CONTENDERS.into_iter().filter(|c| built(c)).count();
    assert!(
        stdout.contains(&format!("{runs}/{runs} runs: rep 1/1 s1-phase x2 done")),
        "{stdout}"
    );

    let r = results(&out);
    assert_eq!(r["scale"], "tiny");
    let summaries = r["summaries"].as_array().unwrap();
    assert_eq!(summaries.len(), CONTENDERS.len());
    for (s, name) in summaries.iter().zip(CONTENDERS) {
        assert_eq!(s["workload"], "s1-phase");
        assert_eq!(s["contender"], name);
        check_summary(s);
        if !built(name) {
            continue;
        }
        assert_eq!(s["after_phase"], "dropped");
        assert!(s["time_s"]["median"].as_f64().unwrap() > 0.0);
        assert!(mib(&s["peak_rss"]["median"]) >= mib(&s["rss_start"]["median"]));
        let phases: Vec<&str> = s["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[0].as_str().unwrap())
            .collect();
        assert_eq!(phases, ["start", "run", "dropped"]);
    }
    assert_eq!(r["reference"], "jemalloc");
    assert_eq!(summaries[3]["time_ratio"]["median"], 1.0);
    // The pool's jobs, and a plain pool inside a phase, give the results' pages back.
    for name in ["arenapool", "arenapool-phase"] {
        let s = summary_of(summaries, name);
        assert!(
            mib(&s["rss_after"]["median"]) <= mib(&s["rss_start"]["median"]) + 16.0,
            "{s}"
        );
    }
    let contenders = r["contenders"].as_array().unwrap();
    assert_eq!(contenders.len(), CONTENDERS.len());
    for (c, name) in contenders.iter().zip(CONTENDERS) {
        assert_eq!(c["name"], name);
        assert!(!c["configuration"].as_str().unwrap().is_empty());
        assert_eq!(c["available"], built(name));
    }
    assert!(
        stdout.contains("dirty_decay_ms:500"),
        "configurations printed"
    );
    let overall = r["overall"].as_array().unwrap();
    assert_eq!(overall.len(), CONTENDERS.len());
    assert_eq!(overall[3]["time_ratio"], 1.0);
    assert_eq!(overall[3]["rss_after_ratio"], 1.0);

    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), CONTENDERS.len());
    for run in runs
        .iter()
        .filter(|r| built(r["contender"].as_str().unwrap()))
    {
        assert!(!run["timeline"].as_array().unwrap().is_empty(), "{run}");
        assert!(run["user_s"].as_f64().unwrap() + run["sys_s"].as_f64().unwrap() > 0.0);
    }

    let chart = std::fs::read_to_string(out.join("charts/rss-s1-phase.svg")).unwrap();
    assert!(chart.starts_with("<svg"));
    for c in CONTENDERS.into_iter().filter(|c| built(c)) {
        assert!(
            chart.contains(&format!(">\n{c}\n<")),
            "chart legend lacks {c}"
        );
    }
    let retained = std::fs::read_to_string(out.join("charts/retained.svg")).unwrap();
    assert!(retained.starts_with("<svg") && retained.contains("s1-phase"));
    let summary = std::fs::read_to_string(out.join("charts/summary.svg")).unwrap();
    assert!(summary.starts_with("<svg") && summary.contains("arenapool"));
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| arenapool |"));
    assert!(md.contains("charts/summary.svg") && md.contains("charts/rss-s1-phase.svg"));
}

#[test]
fn every_workload_runs_under_every_contender_with_equal_checksums() {
    let out = out_dir("all-workloads");
    runner(&["--tiny", "--threads", "2"], &out);
    let r = results(&out);
    let summaries = r["summaries"].as_array().unwrap();
    assert_eq!(summaries.len(), WORKLOADS * CONTENDERS.len());
    for s in summaries {
        check_summary(s);
        if built(s["contender"].as_str().unwrap()) {
            assert!(s["phases"].as_array().unwrap().len() >= 2);
        }
    }
    for info in r["workloads"].as_array().unwrap() {
        let name = info["name"].as_str().unwrap();
        assert!(
            out.join(format!("charts/rss-{name}.svg")).is_file(),
            "{name}"
        );
    }
}

/// `s1-grow` grows the results `s1-phase` returns, so its checksums are theirs; every
/// run records its peak memory in huge pages and its minor faults, which reach the
/// tables and a chart of their own.
#[test]
fn grown_results_agree_and_huge_pages_and_faults_are_reported() {
    let out = out_dir("huge-pages");
    let output = runner(
        &[
            "--tiny",
            "--only",
            "s1-phase,s1-grow",
            "--contenders",
            "jemalloc,jemalloc-thp,arenapool",
        ],
        &out,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("peak AnonHugePages") && stdout.contains("minor faults"),
        "{stdout}"
    );
    assert!(
        stdout.contains("thp:always,metadata_thp:always"),
        "{stdout}"
    );

    let r = results(&out);
    let summaries = r["summaries"].as_array().unwrap();
    assert_eq!(summaries.len(), 2 * 3);
    for s in summaries {
        check_summary(s);
    }
    let runs = r["runs"].as_array().unwrap();
    let checksum = |workload: &str, contender: &str| {
        runs.iter()
            .find(|r| r["workload"] == workload && r["contender"] == contender)
            .map(|r| r["checksum"].clone())
            .unwrap()
    };
    for c in ["jemalloc", "jemalloc-thp", "arenapool"] {
        assert_eq!(checksum("s1-grow", c), checksum("s1-phase", c), "{c}");
    }
    for run in runs {
        let faults = run["minor_faults"].as_u64().unwrap();
        let huge = run["peak_anon_huge"]
            .as_u64()
            .expect("huge pages were read");
        let peak = run["peak_rss"].as_u64().unwrap();
        // Every page a process has was faulted in; huge pages are resident memory.
        assert!(faults > 0 && huge <= peak, "{run}");
        assert_eq!(huge % 4096, 0, "{run}");
    }

    let chart = std::fs::read_to_string(out.join("charts/huge-pages.svg")).unwrap();
    assert!(
        chart.starts_with("<svg") && chart.contains("s1-grow") && chart.contains("jemalloc-thp")
    );
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| peak AnonHugePages | minor faults |"), "{md}");
    assert!(md.contains("### Huge pages and faults") && md.contains("charts/huge-pages.svg"));
    assert!(md.contains("| `s1-grow` |"), "{md}");
}

/// A thread sweep runs every workload at each count, and charts time against threads.
#[test]
fn thread_sweep_runs_each_count_and_charts_it() {
    let out = out_dir("sweep");
    runner(
        &[
            "--tiny",
            "--threads",
            "1,3",
            "--only",
            "larson,mleak,sh8bench",
            "--contenders",
            "jemalloc,arenapool,glibc-trim",
        ],
        &out,
    );
    let r = results(&out);
    assert_eq!(r["threads"], serde_json::json!([1, 3]));
    let summaries = r["summaries"].as_array().unwrap();
    assert_eq!(summaries.len(), 3 * 2 * 3);
    for s in summaries {
        check_summary(s);
    }
    let threads: Vec<u64> = summaries
        .iter()
        .map(|s| s["threads"].as_u64().unwrap())
        .collect();
    assert_eq!(&threads[..6], [1, 1, 1, 3, 3, 3]);
    for w in ["larson", "mleak", "sh8bench"] {
        let chart = std::fs::read_to_string(out.join(format!("charts/threads-{w}.svg"))).unwrap();
        assert!(
            chart.starts_with("<svg") && chart.contains("glibc-trim"),
            "{w}"
        );
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| contender | 1 threads | 3 threads |"), "{md}");
}

/// Writes a shell script `name` into `bins` that a run starts in place of a contender.
fn fake_contender(bins: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = bins.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A contender that dies is reported with what killed it, not left out.
#[test]
fn crashed_and_out_of_memory_contenders_are_reported() {
    let bins = out_dir("fake-bins");
    std::fs::create_dir_all(&bins).unwrap();
    let real = Path::new(env!("CARGO_BIN_EXE_bench-jemalloc"));
    std::os::unix::fs::symlink(real, bins.join("bench-jemalloc")).unwrap();
    let script = |name: &str, body: &str| fake_contender(&bins, name, body);
    script("bench-glibc", "echo 'PHASE start 4096 0'; kill -9 $$");
    script(
        "bench-rpmalloc",
        "echo 'PHASE start 4096 0'; echo 'PHASE dropped 4096 10'; echo 'CHECK 00ff'; kill -11 $$",
    );
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
            "glibc,jemalloc,mimalloc,snmalloc,rpmalloc",
            "--bin-dir",
            bins.to_str().unwrap(),
        ],
        &out,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("KILLED (SIGKILL"), "{stdout}");
    assert!(stdout.contains("OUT OF MEMORY"), "{stdout}");
    assert!(stdout.contains("bench-snmalloc was not built"), "{stdout}");

    let r = results(&out);
    let summaries = r["summaries"].as_array().unwrap();
    assert_eq!(summaries.len(), 5);
    assert_eq!(summaries[0]["contender"], "glibc");
    assert!(summaries[0]["status"]
        .as_str()
        .unwrap()
        .starts_with("KILLED"));
    assert_eq!(summaries[0]["ok_runs"], 0);
    assert!(summaries[0]["time_s"].is_null());
    assert_eq!(summaries[1]["status"], "ok");
    assert_eq!(summaries[2]["status"], "OUT OF MEMORY");
    // No binary: reported as not available, with how to build it.
    assert_eq!(summaries[3]["contender"], "snmalloc");
    assert_eq!(summaries[3]["available"], false);
    assert!(summaries[3]["status"]
        .as_str()
        .unwrap()
        .starts_with("not available"));
    let runs = r["runs"].as_array().unwrap();
    let run = |c: &str| runs.iter().find(|r| r["contender"] == c).unwrap();
    assert_eq!(run("glibc")["status"]["kind"], "signal");
    assert_eq!(run("glibc")["status"]["signal"], 9);
    assert_eq!(run("mimalloc")["status"]["kind"], "exit");
    assert_eq!(run("mimalloc")["status"]["code"], 134);
    assert_eq!(run("snmalloc")["status"]["kind"], "not_available");
    // A crash after the workload finished is still a crash, told apart.
    assert_eq!(summaries[4]["status"], "CRASHED (signal 11, at exit)");
    assert_eq!(summaries[4]["ok_runs"], 0);
    assert_eq!(run("rpmalloc")["status"]["at_exit"], true);
    assert_eq!(run("glibc")["status"]["at_exit"], false);
}

/// A child's own huge-page reading at its end counts in its peak: the sampler cannot
/// read a child that exits before its first tick.
#[test]
fn the_huge_pages_a_child_reports_at_its_end_count_in_its_peak() {
    let bins = out_dir("fake-huge");
    std::fs::create_dir_all(&bins).unwrap();
    // More than a shell can hold, so only the child's message can give this figure.
    let huge: u64 = 3 << 30;
    fake_contender(
        &bins,
        "bench-glibc",
        &format!(
            "echo 'PHASE start 4096 0'; echo 'PHASE done 4096 10'; echo 'CHECK 00ff'; \
             echo 'HUGE {huge}'"
        ),
    );
    let out = out_dir("huge-at-end");
    runner(
        &[
            "--tiny",
            "--only",
            "s1-phase",
            "--contenders",
            "glibc",
            "--bin-dir",
            bins.to_str().unwrap(),
        ],
        &out,
    );
    let r = results(&out);
    let s = &r["summaries"][0];
    assert_eq!(s["status"], "ok", "{s}");
    assert_eq!(
        s["peak_anon_huge"]["min"].as_f64(),
        Some(huge as f64),
        "{s}"
    );
    assert_eq!(
        s["peak_anon_huge"]["max"].as_f64(),
        Some(huge as f64),
        "{s}"
    );
}

/// A real contender prints its huge pages after its checksum, when it is done.
#[test]
fn a_contender_prints_its_huge_pages_at_its_end() {
    let child = Command::new(env!("CARGO_BIN_EXE_bench-jemalloc"))
        .args(["cache-scratch", "tiny", "2"])
        .output()
        .expect("the contender starts");
    assert!(child.status.success(), "{child:?}");
    let stdout = String::from_utf8_lossy(&child.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let bytes: Option<u64> = last.strip_prefix("HUGE ").and_then(|b| b.parse().ok());
    assert!(bytes.is_some(), "{stdout}");
}
