//! The service under a load over loopback (10,000 requests of 4 MiB of parallel work
//! each, 8 in flight, after 400 of 1 MiB that make its threads): `/metrics` answers
//! during the load and its counters move as the phases run, and RSS after the load is
//! within 16 MiB of RSS before it (without the phases, jemalloc keeps 30 MiB and more of
//! the load's freed pages for its decay time). RSS is the process's: this test runs
//! alone in its binary.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arenapool_service_example::serve;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

const MIB: usize = 1 << 20;

/// The body of `GET path`, on a connection of its own; panics unless it is a 200.
fn get(address: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(address).expect("a connection");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("a timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("the response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
    body.to_string()
}

/// Phases labelled `request` ended, as `/metrics` says.
fn requests_ended(metrics: &str) -> u64 {
    let series = "arenapool_work_ended_total{work=\"phase\",name=\"request\"} ";
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series))
        .map_or(0, |value| value.parse().expect("a count"))
}

/// `requests` requests for `mib` MiB of work each, 8 in flight.
fn load(address: SocketAddr, requests: usize, mib: usize) {
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..requests / 8 {
                    let path = format!("/work?mib={mib}");
                    let sum: u64 = get(address, &path).trim().parse().expect("a sum");
                    assert!(sum > 0);
                }
            });
        }
    });
}

#[test]
fn metrics_answer_and_memory_goes_back_under_load() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .expect("a runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a loopback port");
    let address = listener.local_addr().expect("its address");
    runtime.spawn(serve(listener));

    // Threads, pools and arenas made, as in a service that has run a while.
    load(address, 400, 1);
    let before = requests_ended(&get(address, "/metrics"));
    assert!(before >= 400, "{before}");
    let rss_before = arenapool::rss();

    let done = AtomicBool::new(false);
    let scraped = std::thread::scope(|s| {
        let scraper = s.spawn(|| {
            let mut seen = Vec::new();
            while !done.load(Ordering::Relaxed) {
                seen.push(requests_ended(&get(address, "/metrics")));
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        });
        load(address, 10_000, 4);
        done.store(true, Ordering::Relaxed);
        scraper.join().expect("the scraper")
    });
    let after = requests_ended(&get(address, "/metrics"));
    let rss_after = arenapool::rss();

    assert!(
        scraped.len() >= 3,
        "/metrics answered {} times during the load",
        scraped.len()
    );
    assert!(
        scraped.windows(2).all(|w| w[0] <= w[1]) && scraped.last() > scraped.first(),
        "the count of phases ended, scraped during the load: {scraped:?}"
    );
    assert_eq!(after - before, 10_000);
    println!(
        "RSS before the load {:.1} MiB, after {:.1} MiB; /metrics scraped {} times during it",
        rss_before as f64 / MIB as f64,
        rss_after as f64 / MIB as f64,
        scraped.len()
    );
    assert!(
        rss_after <= rss_before + 16 * MIB,
        "RSS grew from {rss_before} to {rss_after} bytes"
    );
}
