//! `[http]`: the metrics, health and status page endpoint (off by default).

use std::time::Duration;

use serde::Deserialize;

use super::values::opt_duration;

/// `[http]`: the metrics, health and status page endpoint (off by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// `listen`: the address to serve on; `None` when the key is unset or "".
    pub listen: Option<String>,
    /// `/readyz` fails while the lag behind the source is above this.
    pub ready_max_lag: Duration,
    /// `/healthz` fails when the event loop has made no progress for this long.
    pub stall_timeout: Duration,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    listen: Option<String>,
    ready_max_lag: Option<String>,
    stall_timeout: Option<String>,
}

pub(super) fn parse_http(raw: RawHttp) -> std::result::Result<HttpConfig, String> {
    let listen = match raw.listen.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(addr) => {
            // A host name is resolved when binding; the shape is checked here.
            let (host, port) = addr.rsplit_once(':').ok_or_else(|| {
                format!("http.listen: \"{addr}\" is not HOST:PORT (e.g. \"0.0.0.0:9464\")")
            })?;
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(format!(
                    "http.listen: \"{addr}\" is not HOST:PORT (e.g. \"0.0.0.0:9464\")"
                ));
            }
            Some(addr.to_string())
        }
    };
    Ok(HttpConfig {
        listen,
        ready_max_lag: opt_duration(raw.ready_max_lag, "http.ready_max_lag", 60)?,
        stall_timeout: opt_duration(raw.stall_timeout, "http.stall_timeout", 300)?,
    })
}
