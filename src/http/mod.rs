//! `[http]`: `/metrics` (Prometheus), `/healthz`, `/readyz` and the status
//! page `/`, served beside the stream with hyper. The pipeline reports to a
//! [`Metrics`] handle; this module only reads it (DESIGN.md, "Operations").

pub mod metrics;
mod page;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use crate::config::{Config, HttpConfig, SourceConfig};
use crate::error::{Error, Result};
pub use metrics::Metrics;

/// How often the lag in bytes is measured against the server's binlog head.
const LAG_BYTES_EVERY: Duration = Duration::from_secs(5);

/// Binds `[http] listen` (a definite error naming the key when it cannot)
/// and serves it in the background, with the chart's sampler and, when a
/// server is configured, the lag-in-bytes poller. Nothing when `listen` is
/// unset.
pub async fn start(config: &Config, metrics: Arc<Metrics>) -> Result<()> {
    let Some(listen) = config.http.listen.clone() else {
        return Ok(());
    };
    let listener = TcpListener::bind(&listen)
        .await
        .map_err(|e| Error::Listen(format!("cannot listen on {listen}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::Listen(format!("cannot listen on {listen}: {e}")))?;
    info!(listen = %local, "serving /metrics, /healthz, /readyz and the status page");
    let served = Arc::new(Served {
        metrics: Arc::clone(&metrics),
        http: config.http.clone(),
        lake: config.sink.url.clone(),
    });
    tokio::spawn(serve(listener, served));
    let sampled = Arc::clone(&metrics);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(metrics::SAMPLE_EVERY);
        loop {
            every.tick().await;
            sampled.sample();
        }
    });
    if config.source.has_server() && config.source.binlog_dir.is_none() {
        tokio::spawn(poll_lag_bytes(config.source.clone(), metrics));
    }
    Ok(())
}

struct Served {
    metrics: Arc<Metrics>,
    http: HttpConfig,
    lake: String,
}

async fn serve(listener: TcpListener, served: Arc<Served>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: try again shortly.
                warn!(error = %e, kind = "transient", "http: cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let served = Arc::clone(&served);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let served = Arc::clone(&served);
                async move { Ok::<_, Infallible>(route(&served, &req)) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(error = %e, "http connection ended");
            }
        });
    }
}

fn route(served: &Served, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
    }
    let m = &served.metrics;
    match req.uri().path() {
        "/metrics" => match m.encode() {
            Ok(body) => respond(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body,
            ),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        },
        "/healthz" => match m.healthy(served.http.stall_timeout) {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        "/readyz" => match m.ready(served.http.ready_max_lag) {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        "/" => respond(
            StatusCode::OK,
            "text/html; charset=utf-8",
            page::render(m, &served.lake, &served.http),
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    respond(status, "text/plain; charset=utf-8", body)
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        response.headers_mut().insert(CONTENT_TYPE, v);
    }
    response.headers_mut().insert(
        CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    response
}

/// Measures the binlog bytes between the committed cursor and the server's
/// head every [`LAG_BYTES_EVERY`], on a connection of its own (a plain
/// client session, not a replica). While the server is unreachable the
/// gauge says -1 (unknown).
async fn poll_lag_bytes(source: SourceConfig, metrics: Arc<Metrics>) {
    let mut conn = None;
    let mut every = tokio::time::interval(LAG_BYTES_EVERY);
    loop {
        every.tick().await;
        let Some(committed) = metrics.committed_position() else {
            continue;
        };
        if conn.is_none() {
            conn = crate::source::connect(&source).await.ok();
        }
        let Some(c) = conn.as_mut() else {
            metrics.set_lag_bytes(None);
            continue;
        };
        let measured = async {
            let head = crate::source::head(c).await?;
            let logs = crate::source::binary_logs(c).await?;
            Ok::<_, Error>(crate::status::lag_bytes(&logs, &committed, &head))
        }
        .await;
        match measured {
            Ok(lag) => metrics.set_lag_bytes(lag),
            Err(e) => {
                debug!(error = %e, "could not measure the lag in bytes");
                metrics.set_lag_bytes(None);
                conn = None;
            }
        }
    }
}
