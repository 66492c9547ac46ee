//! Opening mysql_async connections to the source: TLS as `source.tls` says
//! (with the `preferred` fallback to a plain connection), and errors that
//! name what to fix.

use mysql_async::{Conn, OptsBuilder};

use super::replica::Replica;
use super::tls;
use crate::config::{SourceConfig, TlsMode, PASSWORD_ENV};
use crate::error::{Error, Result};

pub(super) fn opts(cfg: &SourceConfig) -> OptsBuilder {
    OptsBuilder::default()
        .ip_or_hostname(cfg.host.clone())
        .tcp_port(cfg.port)
        .user(Some(cfg.user.clone()))
        .pass(cfg.password.clone())
        .prefer_socket(false)
        .wait_timeout(Some(28_800))
        .ssl_opts(tls::ssl_opts(&cfg.tls))
        // mysql_clear_password would send the password as it is; sluice's
        // users log in with a hashing plugin.
        .enable_cleartext_plugin(false)
}

/// Opens a connection (encrypted as `source.tls` says); authentication,
/// TLS and reachability errors are definite.
pub async fn connect(cfg: &SourceConfig) -> Result<Conn> {
    let mut options = opts(cfg);
    if cfg.tls.mode == TlsMode::VerifyCa {
        // Our own connection checks the chain and learns a name the
        // certificate holds; mysql_async checks that name.
        if tls::verify_ca_name().is_none() {
            drop(Replica::connect(cfg).await?);
        }
        if let Some(name) = tls::verify_ca_name() {
            options = options.ssl_opts(
                tls::ssl_opts(&cfg.tls).map(|o| o.with_danger_tls_hostname_override(Some(name))),
            );
        }
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let result = match connect_with(cfg, options.clone()).await {
            // `preferred`: a server without TLS gets a plain connection.
            Err(mysql_async::Error::Driver(
                mysql_async::DriverError::NoClientSslFlagFromServer,
            )) if cfg.tls.mode == TlsMode::Preferred => {
                connect_with(cfg, opts(cfg).ssl_opts(None)).await
            }
            other => other,
        };
        match result {
            // mysql_async takes an auth switch's data through mysql_common's
            // `plugin_data()`, which drops a trailing 0 byte: MariaDB's
            // ed25519 nonce is 32 random bytes without a terminator, so one
            // login in 256 signs a short nonce and is refused. A second
            // login gets another nonce; a wrong password is refused again.
            Err(mysql_async::Error::Server(s)) if s.code == 1045 && tries < 2 => {
                tracing::debug!(user = %cfg.user, "login refused; trying once more with a new nonce");
            }
            other => return other.map_err(|e| connect_error(cfg, e)),
        }
    }
}

async fn connect_with(
    cfg: &SourceConfig,
    opts: OptsBuilder,
) -> std::result::Result<Conn, mysql_async::Error> {
    tokio::time::timeout(cfg.connect_timeout, Conn::new(opts))
        .await
        .unwrap_or_else(|_| {
            Err(mysql_async::Error::Io(mysql_async::IoError::Io(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", cfg.connect_timeout),
                ),
            )))
        })
}

/// What a refused login may also mean when sluice did not encrypt it.
pub(crate) fn tls_hint(cfg: &SourceConfig) -> &'static str {
    match cfg.tls.mode {
        TlsMode::Disabled => "; or the server or the user requires TLS (require_secure_transport, REQUIRE SSL) and source.tls = \"disabled\": set source.tls = \"required\" or stricter",
        _ => "",
    }
}

/// Whether a connection failed in its TLS handshake (a certificate that
/// does not verify, a server that speaks no TLS).
fn is_tls_failure(e: &mysql_async::Error) -> bool {
    match e {
        mysql_async::Error::Io(mysql_async::IoError::Tls(_)) => true,
        mysql_async::Error::Io(mysql_async::IoError::Io(io)) => io
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
        _ => false,
    }
}

fn connect_error(cfg: &SourceConfig, e: mysql_async::Error) -> Error {
    let addr = format!("{}:{}", cfg.host, cfg.port);
    match &e {
        mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer) => {
            Error::Preflight(format!(
                "{addr} does not offer TLS, but source.tls = \"{}\"; enable TLS on the server (ssl_cert, ssl_key) or set source.tls = \"preferred\"",
                cfg.tls.mode.name()
            ))
        }
        mysql_async::Error::Server(s) if s.message.contains("insecure transport") => {
            Error::Preflight(format!(
                "{addr} requires TLS (require_secure_transport) but source.tls = \"{}\"; set source.tls = \"required\" or stricter",
                cfg.tls.mode.name()
            ))
        }
        _ if is_tls_failure(&e) => {
            tls::handshake_error(&addr, cfg.tls.mode, &std::io::Error::other(e.to_string()))
        }
        mysql_async::Error::Server(s) if s.code == 1045 || s.code == 1698 => Error::Preflight(format!(
            "authentication failed for user `{}` at {}:{} ({}); check the user in source.url and the password in {PASSWORD_ENV} or source.password_file{}",
            cfg.user, cfg.host, cfg.port, s.message, tls_hint(cfg)
        )),
        // Unreachable servers are transient: at start they fail the run with
        // this message, after a successful start they are retried.
        _ => Error::Connection(format!(
            "cannot connect to {}:{}: {e}; check source.url and that the server is up",
            cfg.host, cfg.port
        )),
    }
}
