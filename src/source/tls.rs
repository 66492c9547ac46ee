//! TLS to the source (`[source] tls`), the same for both kinds of
//! connection: mysql_async's (preflight, schema bootstrap, snapshot reads,
//! MySQL's binlog stream) through [`ssl_opts`], and our own MariaDB
//! replication connection through [`connector`]. Both use rustls with the
//! aws-lc-rs provider that the object store's HTTPS client already brings.
//!
//! The modes are MySQL's `--ssl-mode`: `preferred` and `required` encrypt
//! without checking who answers (protection against passive listeners
//! only), `verify_ca` checks the certificate chain against `ca_file`, and
//! `verify_identity` also checks that the certificate names the host of
//! `source.url`.

use std::path::Path;
use std::sync::Arc;

use mysql_async::{ClientIdentity, SslOpts};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_rustls::TlsConnector;

use crate::config::{TlsConfig, TlsMode};
use crate::error::{Error, Result};

/// mysql_async's options for `tls`; `None` for a plain connection.
pub fn ssl_opts(tls: &TlsConfig) -> Option<SslOpts> {
    let opts = SslOpts::default();
    let opts = match tls.mode {
        TlsMode::Disabled => return None,
        TlsMode::Preferred | TlsMode::Required => opts.with_danger_accept_invalid_certs(true),
        // `verify_ca`: mysql_async's own way of skipping the name check
        // looks for the text "NotValidForName" in rustls' error, which the
        // rustls of our tree no longer prints; the caller checks the name
        // the certificate presents instead ([`verify_ca_name`]).
        TlsMode::VerifyCa | TlsMode::VerifyIdentity => opts
            .with_root_certs(tls.ca_file.iter().map(|p| p.clone().into()).collect())
            .with_disable_built_in_roots(true),
    };
    Some(
        opts.with_client_identity(
            tls.client_identity
                .as_ref()
                .map(|(cert, key)| ClientIdentity::new(cert.clone().into(), key.clone().into())),
        ),
    )
}

/// A name the server's certificate presents, learned by a `verify_ca`
/// handshake of our own connection once the chain checked out.
static PRESENTED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The name mysql_async's connections check the certificate against under
/// `verify_ca` (after [`connector`]'s handshake learned it): the chain is
/// checked in full and the name is one the certificate holds.
pub fn verify_ca_name() -> Option<String> {
    PRESENTED.lock().ok().and_then(|n| n.clone())
}

/// A name out of rustls' list of presented names (`DnsName("db.internal")`);
/// a wildcard gets a label that matches it.
fn presented_name(presented: &[String]) -> Option<String> {
    presented.iter().find_map(|p| {
        let name = p.strip_prefix("DnsName(\"")?.strip_suffix("\")")?;
        Some(match name.strip_prefix("*.") {
            Some(rest) => format!("sluice.{rest}"),
            None => name.to_owned(),
        })
    })
}

/// The connector of our own replication connection.
pub fn connector(tls: &TlsConfig) -> Result<TlsConnector> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = RootCertStore::empty();
    if let Some(ca) = &tls.ca_file {
        for cert in read_certs(ca, "ca_file")? {
            roots
                .add(cert)
                .map_err(|e| Error::Preflight(format!("source.ca_file: {}: {e}", ca.display())))?;
        }
    }
    let check = if tls.mode.verifies() {
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| Error::Preflight(format!("source.ca_file: {e}")))?;
        Check::Chain {
            webpki,
            names: tls.mode == TlsMode::VerifyIdentity,
        }
    } else {
        Check::Nothing
    };
    let verifier = Arc::new(Verifier {
        check,
        provider: provider.clone(),
    });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Preflight(format!("source.tls: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match &tls.client_identity {
        Some((cert, key)) => {
            let chain = read_certs(cert, "cert_file")?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                Error::Preflight(format!(
                    "source.key_file: no private key in {}: {e}",
                    key.display()
                ))
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Preflight(format!("source.cert_file: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// The name the server's certificate is checked against: the host of
/// `source.url`, a DNS name or an IP address.
pub fn server_name(host: &str) -> Result<ServerName<'static>> {
    ServerName::try_from(host.to_owned()).map_err(|e| {
        Error::Preflight(format!(
            "source.url: `{host}` is not a host name TLS can check ({e})"
        ))
    })
}

fn read_certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::Preflight(format!("source.{key}: {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Preflight(format!(
            "source.{key}: {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

/// The one-line error of a failed TLS handshake, naming the key to fix.
pub fn handshake_error(addr: &str, mode: TlsMode, e: &std::io::Error) -> Error {
    let hint = match mode {
        TlsMode::VerifyCa | TlsMode::VerifyIdentity => {
            "check that source.ca_file holds the CA that signed the server's certificate (and, for verify_identity, that the certificate names the host of source.url)"
        }
        _ => "check the server's TLS setup (ssl_cert, ssl_key) or set source.tls",
    };
    Error::Preflight(format!(
        "TLS handshake with {addr} failed (source.tls = \"{}\"): {e}; {hint}",
        mode.name()
    ))
}

/// What is checked of the server's certificate.
#[derive(Debug)]
enum Check {
    /// `preferred` and `required`: nothing (encryption only).
    Nothing,
    /// `verify_ca`: the chain; `verify_identity`: also the name.
    Chain {
        webpki: Arc<WebPkiServerVerifier>,
        names: bool,
    },
}

#[derive(Debug)]
struct Verifier {
    check: Check,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Check::Chain { webpki, names } = &self.check else {
            return Ok(ServerCertVerified::assertion());
        };
        match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                presented,
                ..
            })) if !names => {
                if let (Some(name), Ok(mut learned)) =
                    (presented_name(&presented), PRESENTED.lock())
                {
                    *learned = Some(name);
                }
                Ok(ServerCertVerified::assertion())
            }
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName)) if !names => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    // The handshake's signatures are always checked: they prove that the
    // peer holds the key of the certificate it sent.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presented_names_as_rustls_lists_them() {
        let names =
            |v: &[&str]| presented_name(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(names(&["DnsName(\"localhost\")"]), Some("localhost".into()));
        assert_eq!(
            names(&["IpAddress(10.0.0.1)", "DnsName(\"*.db.internal\")"]),
            Some("sluice.db.internal".into())
        );
        assert_eq!(names(&["IpAddress(10.0.0.1)"]), None);
        assert_eq!(names(&[]), None);
    }
}
