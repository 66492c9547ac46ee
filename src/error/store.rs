//! Which object store errors retrying can fix (DESIGN.md "Running").
//!
//! Transient: the store did not answer (connection refused or reset, a
//! timeout, a response cut off) or answered 5xx, 429 or 408 — retried with
//! backoff. Definite: the store answered and will answer the same again —
//! access denied, unknown credentials, a missing bucket, a wrong region, an
//! operation it does not support — so sluice stops with one line that names
//! the problem and the fix.
//!
//! object_store 0.14 gives a 403 as `PermissionDenied`, a 401 as
//! `Unauthenticated`, a 404 of a put or get (object or bucket) as
//! `NotFound` but of a listing as `Generic`, and every other failure as
//! `Generic` whose text carries the HTTP status and the S3 error body (its
//! retry error type is private, so the status is read from the text). The tests in `tests/object_store.rs` pin this against
//! moto_server and a fault-injecting proxy.

/// What retrying an object store call can do about its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The store may answer differently later: retry with backoff.
    Transient,
    /// The store will answer the same again: stop and tell the operator.
    Definite {
        problem: &'static str,
        fix: &'static str,
    },
}

/// S3 error codes that say "try again" whatever their HTTP status.
const TRANSIENT_CODES: [&str; 6] = [
    "RequestTimeout",
    "ExpiredToken",
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "OperationAborted",
];

const CREDENTIALS_FIX: &str = "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the role sluice runs as) and that the endpoint is the store that issued them";
const REGION_FIX: &str = "set AWS_REGION or [sink] region to the bucket's region";

pub fn verdict(e: &object_store::Error) -> Verdict {
    use object_store::Error as E;
    let text = e.to_string();
    let code = s3_code(&text);
    if code.is_some_and(|c| TRANSIENT_CODES.contains(&c)) {
        return Verdict::Transient;
    }
    let definite = |problem, fix| Verdict::Definite { problem, fix };
    if code == Some("NoSuchBucket") {
        // A put or get says NotFound, a listing Generic with status 404.
        return definite(
            "the bucket does not exist",
            "create it, or correct the bucket name in [sink] url",
        );
    }
    match e {
        E::NotFound { .. } => definite(
            "an object sluice needs is missing from the lake",
            "something else deletes in this lake: stop it and restart sluice",
        ),
        E::PermissionDenied { .. } | E::Unauthenticated { .. }
            if code.is_some_and(|c| {
                matches!(
                    c,
                    "InvalidAccessKeyId"
                        | "SignatureDoesNotMatch"
                        | "InvalidToken"
                        | "TokenRefreshRequired"
                )
            }) =>
        {
            definite("the store does not accept the credentials", CREDENTIALS_FIX)
        }
        E::PermissionDenied { .. } => definite(
            "access denied",
            "grant sluice's credentials s3:ListBucket on the bucket and s3:GetObject, s3:PutObject, s3:DeleteObject and s3:AbortMultipartUpload under the lake prefix (README \"Object stores\")",
        ),
        E::Unauthenticated { .. } => {
            definite("the store does not accept the credentials", CREDENTIALS_FIX)
        }
        E::NotSupported { .. } | E::NotImplemented { .. } => definite(
            "the store does not support an operation sluice needs",
            "use a store with conditional writes (AWS S3, MinIO, Cloudflare R2, GCS, Azure Blob, a local path)",
        ),
        E::AlreadyExists { .. } | E::Precondition { .. } | E::NotModified { .. } => definite(
            "an object sluice writes only once is already there",
            "something else writes in this lake: stop any other sidecar on it and restart",
        ),
        E::InvalidPath { .. } => definite(
            "the lake holds an object whose name is not a valid path",
            "remove objects under the lake prefix that sluice did not write",
        ),
        E::UnknownConfigurationKey { .. } => definite(
            "the object store configuration is invalid",
            "check the AWS_* (or GOOGLE_*, AZURE_*) variables and the [sink] keys",
        ),
        E::JoinError { .. } => definite(
            "an object store task failed",
            "report this as a bug with the log",
        ),
        _ => generic_verdict(e, &text, code),
    }
}

/// A `Generic` error: by HTTP status where the store answered, by the I/O
/// error for a local lake, transient otherwise (no answer at all).
fn generic_verdict(e: &object_store::Error, text: &str, code: Option<&str>) -> Verdict {
    let definite = |problem, fix| Verdict::Definite { problem, fix };
    if text.contains("Received redirect without LOCATION")
        || matches!(
            code,
            Some(
                "PermanentRedirect"
                    | "AuthorizationHeaderMalformed"
                    | "IllegalLocationConstraintException"
            )
        )
    {
        return definite("the bucket is in another region", REGION_FIX);
    }
    if let Some(status) = http_status(text) {
        return match status {
            408 | 429 | 500..=599 => Verdict::Transient,
            301 | 307 => definite("the bucket is in another region", REGION_FIX),
            _ if code == Some("InvalidBucketName") => definite(
                "the bucket name is not valid",
                "correct the bucket name in [sink] url",
            ),
            400..=499 => definite(
                "the store refuses the requests sluice sends",
                "check [sink] url, the endpoint, the region and the credentials",
            ),
            _ => Verdict::Transient,
        };
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
                    return definite(
                        "the lake directory cannot be written",
                        "let the user sluice runs as write the lake directory",
                    )
                }
                _ => {}
            }
        }
        source = err.source();
    }
    Verdict::Transient
}

pub fn is_transient(e: &object_store::Error) -> bool {
    verdict(e) == Verdict::Transient
}

/// One line for the operator: what is wrong, what the store said, and the fix.
pub fn explain(e: &object_store::Error) -> String {
    let said = said(e);
    match verdict(e) {
        Verdict::Transient => format!("unavailable ({said})"),
        Verdict::Definite { problem, fix } => format!("{problem} ({said}); {fix}"),
    }
}

/// The store's own words, shortened: the status, S3's error code and
/// message, the request; or the error's text on one line.
fn said(e: &object_store::Error) -> String {
    let text = e.to_string();
    let request = text
        .split_once("Error performing ")
        .and_then(|(_, rest)| rest.split(" in ").next());
    match (http_status(&text), request) {
        (Some(status), Some(request)) => {
            let code = s3_code(&text).unwrap_or("");
            let message = between(&text, "<Message>", "</Message>").unwrap_or("");
            let mut out = format!("HTTP {status}");
            for part in [code, message] {
                if !part.is_empty() {
                    out.push(' ');
                    out.push_str(part);
                }
            }
            format!("{out} on {request}")
        }
        _ => {
            let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
            match one_line.char_indices().nth(400) {
                Some((cut, _)) => format!("{}…", &one_line[..cut]),
                None => one_line,
            }
        }
    }
}

/// The HTTP status object_store's retry error reports ("… status code: 404 Not Found …").
fn http_status(text: &str) -> Option<u16> {
    let (_, rest) = text.split_once("status code: ")?;
    rest.get(..3)?.parse().ok()
}

/// The `<Code>` of an S3 error body.
fn s3_code(text: &str) -> Option<&str> {
    between(text, "<Code>", "</Code>")
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let (_, rest) = text.split_once(open)?;
    Some(rest.split_once(close)?.0.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(msg: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: msg.to_string().into(),
        }
    }

    #[test]
    fn status_and_code_decide_generic_errors() {
        let answer = |status: &str, code: &str| {
            generic(&format!(
                "Error performing PUT http://h/b/k in 3ms - Server returned non-2xx status code: {status}: <?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message></Error>"
            ))
        };
        for (status, code) in [
            ("503 Service Unavailable", "SlowDown"),
            ("500 Internal Server Error", "InternalError"),
            ("502 Bad Gateway", ""),
            ("429 Too Many Requests", ""),
            ("400 Bad Request", "RequestTimeout"),
            ("400 Bad Request", "ExpiredToken"),
        ] {
            assert!(is_transient(&answer(status, code)), "{status} {code}");
        }
        for (status, code) in [
            ("400 Bad Request", "InvalidBucketName"),
            ("400 Bad Request", "AuthorizationHeaderMalformed"),
            ("301 Moved Permanently", "PermanentRedirect"),
            ("405 Method Not Allowed", "MethodNotAllowed"),
        ] {
            assert!(!is_transient(&answer(status, code)), "{status} {code}");
        }
        // No answer at all: a connection error or a timeout.
        assert!(is_transient(&generic(
            "Error performing PUT http://h/b/k in 30s - error sending request"
        )));
        let line = explain(&answer("301 Moved Permanently", "PermanentRedirect"));
        assert_eq!(
            line,
            format!("the bucket is in another region (HTTP 301 PermanentRedirect m on PUT http://h/b/k); {REGION_FIX}")
        );
    }

    #[test]
    fn local_permission_errors_are_definite() {
        let denied = object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(std::io::Error::from(std::io::ErrorKind::PermissionDenied)),
        };
        assert!(!is_transient(&denied));
        let full = object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(std::io::Error::from(std::io::ErrorKind::Interrupted)),
        };
        assert!(is_transient(&full));
        let line = explain(&object_store::Error::NotImplemented {
            operation: "put_opts".into(),
            implementer: "X".into(),
        });
        assert!(
            !line.contains('\n') && line.contains("conditional writes"),
            "{line}"
        );
    }
}
