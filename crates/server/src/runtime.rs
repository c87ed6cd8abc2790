//! The process around the server: the tokio runtime whose threads ask for
//! short time slices, and the signals that stop it.

/// A multi-threaded runtime whose threads ask for `slice` as they start
/// (see [`tracedb_sched`]): every thread of the runtime handles requests, or
/// work they wait on. A thread that cannot shorten its slice warns once.
pub fn request_runtime(slice: std::time::Duration) -> std::io::Result<tokio::runtime::Runtime> {
    let warned = std::sync::atomic::AtomicBool::new(false);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(move || {
            if let Err(e) = tracedb_sched::use_short_slice(slice) {
                if !warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(error = %e, "could not shorten the request threads' time slice");
                }
            }
        })
        .build()
}

/// Resolves on ctrl-c or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "listening for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "listening for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
