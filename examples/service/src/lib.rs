//! A small HTTP service on arenapool: each request to `/work` runs a parallel phase
//! (rayon's global pool, its large blocks in the phase arenas, given back when the
//! phase ends), and `/metrics` serves arenapool's metrics in Prometheus' text format.
//!
//! - `GET /work?mib=N`: builds N MiB of scratch in parallel, in a phase labelled
//!   `request`, and answers with a checksum of it.
//! - `GET /metrics`: `arenapool::stats()` as `arenapool::write_prometheus` writes it.
//!
//! Run it with `cargo run --release -- 127.0.0.1:8080` in `examples/service/`.

use std::convert::Infallible;
use std::sync::OnceLock;

use arenapool::Label;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rayon::prelude::*;
use tokio::net::TcpListener;

/// The most scratch a request may ask for, in MiB.
pub const MAX_MIB: usize = 256;

/// Serves connections from `listener` until the runtime stops: each on a task of its
/// own, HTTP/1.1.
pub async fn serve(listener: TcpListener) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            // A connection that fails (the client went away) ends alone.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let response = match request.uri().path() {
        "/metrics" => {
            let text = tokio::task::spawn_blocking(metrics_text).await;
            match text {
                Ok(text) => Response::builder()
                    .header("content-type", "text/plain; version=0.0.4")
                    .body(Full::new(Bytes::from(text))),
                Err(_) => status(StatusCode::INTERNAL_SERVER_ERROR, "the snapshot failed"),
            }
        }
        "/work" => match mib_asked(request.uri().query()) {
            Some(mib) => match tokio::task::spawn_blocking(move || work(mib)).await {
                Ok(sum) => Response::builder().body(Full::new(Bytes::from(format!("{sum}\n")))),
                Err(_) => status(StatusCode::INTERNAL_SERVER_ERROR, "the work failed"),
            },
            None => status(
                StatusCode::BAD_REQUEST,
                "ask for /work?mib=N, with N from 1 to 256",
            ),
        },
        _ => status(StatusCode::NOT_FOUND, "try /work?mib=N or /metrics"),
    };
    Ok(response.unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))))
}

fn status(code: StatusCode, text: &'static str) -> hyper::http::Result<Response<Full<Bytes>>> {
    Response::builder()
        .status(code)
        .body(Full::new(Bytes::from(format!("{text}\n"))))
}

/// `N` of a query `mib=N`, if it is from 1 to [`MAX_MIB`].
fn mib_asked(query: Option<&str>) -> Option<usize> {
    let mib: usize = query?.strip_prefix("mib=")?.parse().ok()?;
    (1..=MAX_MIB).contains(&mib).then_some(mib)
}

/// The page every `/metrics` answer is.
pub fn metrics_text() -> String {
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = arenapool::write_prometheus(&arenapool::stats(), &mut text);
    text
}

/// The work of one request: `mib` MiB of scratch built in parallel (blocks of 256 KiB)
/// in a phase labelled `request`, summed in parallel, and dropped before the phase
/// ends.
pub fn work(mib: usize) -> u64 {
    static REQUEST: OnceLock<Option<Label>> = OnceLock::new();
    let run = || {
        let scratch: Vec<Vec<u8>> = (0..mib * 4)
            .into_par_iter()
            .map(|i| vec![(i % 251) as u8; 256 << 10])
            .collect();
        scratch
            .par_iter()
            .map(|block| block.iter().map(|&b| u64::from(b)).sum::<u64>())
            .sum()
    };
    match REQUEST.get_or_init(|| Label::new("request").ok()) {
        Some(label) => label.phase(run),
        None => arenapool::phase(run),
    }
}
