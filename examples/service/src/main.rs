//! The service: `arenapool-service-example [ADDRESS]` (127.0.0.1:8080 by default).

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

fn main() -> std::io::Result<()> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_string());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_io()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&address).await?;
        eprintln!("serving /work?mib=N and /metrics on http://{address}");
        arenapool_service_example::serve(listener).await
    })
}
