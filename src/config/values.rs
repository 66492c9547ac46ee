//! Values inside the configuration: the lake URL, durations, sizes, and
//! TOML errors that point at the line.

use super::*;

pub(super) const SINK_URL_HINT: &str =
    "use s3://bucket/prefix, gs://bucket/prefix, az://container/prefix, file:///path or an absolute path";

/// `[sink] url`: a cloud URL, `file:///path`, or a plain path.
pub fn parse_lake_url(url: &str) -> std::result::Result<LakeLocation, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        // A plain path; a relative one is relative to the working directory.
        if url.trim().is_empty() {
            return Err(format!("sink.url: empty, {SINK_URL_HINT}"));
        }
        return Ok(LakeLocation::Local(PathBuf::from(url)));
    };
    match scheme {
        "file" => {
            if !rest.starts_with('/') {
                return Err(format!(
                    "sink.url: `{url}`: a file URL needs an absolute path, file:///path"
                ));
            }
            let parsed = url::Url::parse(url).map_err(|e| format!("sink.url: `{url}`: {e}"))?;
            let root = parsed
                .to_file_path()
                .map_err(|_| format!("sink.url: `{url}` is not a local path"))?;
            Ok(LakeLocation::Local(root))
        }
        "s3" | "gs" | "az" => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!(
                    "sink.url: `{url}` names no bucket, {SINK_URL_HINT}"
                ));
            }
            if bucket.contains(['?', '#', '@', ':']) || prefix.contains(['?', '#']) {
                return Err(format!(
                    "sink.url: `{url}`: write the URL as {scheme}://bucket/prefix without credentials, port or query"
                ));
            }
            let prefix = prefix.trim_matches('/');
            if prefix
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
                && !prefix.is_empty()
            {
                return Err(format!(
                    "sink.url: `{url}`: the prefix has an empty, `.` or `..` segment"
                ));
            }
            let (bucket, prefix) = (bucket.to_string(), prefix.to_string());
            Ok(match scheme {
                "s3" => LakeLocation::S3 { bucket, prefix },
                "gs" => LakeLocation::Gcs { bucket, prefix },
                _ => LakeLocation::Azure {
                    container: bucket,
                    prefix,
                },
            })
        }
        other => Err(format!(
            "sink.url: `{url}`: scheme `{other}` is not supported, {SINK_URL_HINT}"
        )),
    }
}

/// A TOML or type error as one line that names the key: serde reports the
/// field only for unknown keys, so the key is read from the source line the
/// error points at, under the `[section]` above it.
pub(super) fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().replace('\n', " ");
    let Some(span) = e.span() else {
        return message;
    };
    let start = span.start.min(text.len());
    let line_no = text[..start].lines().count().max(1);
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let section = text[..line_start + line.len()]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim());
    // A missing key is reported at its table, whose first line names another.
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"'))
        .filter(|k| !k.is_empty() && !k.starts_with('[') && !message.starts_with("missing field"));
    let named = match (section, key) {
        (Some(s), Some(k)) => format!("{s}.{k}"),
        (None, Some(k)) => k.to_string(),
        (Some(s), None) => s.to_string(),
        (None, None) => return format!("line {line_no}: {message}"),
    };
    format!("{named}: {message} (line {line_no})")
}

pub(super) fn opt_duration(
    value: Option<String>,
    key: &str,
    default_secs: u64,
) -> std::result::Result<Duration, String> {
    match value {
        Some(s) => parse_duration(&s).map_err(|e| format!("{key}: {e}")),
        None => Ok(Duration::from_secs(default_secs)),
    }
}

/// A target file size: at least 1 KiB (smaller files cost more in
/// footers and requests than they hold).
pub(super) fn opt_file_size(
    value: Option<String>,
    key: &str,
    default: usize,
) -> std::result::Result<usize, String> {
    let bytes = match value {
        Some(s) => parse_size(&s).map_err(|e| format!("{key}: {e}"))?,
        None => default,
    };
    if bytes < 1024 {
        return Err(format!("{key}: must be at least 1KiB"));
    }
    Ok(bytes)
}

/// The shortest duration any key accepts: below it timers round to zero.
pub const MIN_DURATION: Duration = Duration::from_millis(1);
/// The longest duration any key accepts. Far beyond any useful timeout or
/// interval, and small enough that sums and multiples of it (three
/// heartbeats, a deadline from now) cannot overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// `"500ms"`, `"10s"`, `"5m"`, `"1h"`, between [`MIN_DURATION`] and [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like \"10s\" or \"500ms\""))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        _ => return Err(format!("`{s}`: unit must be ms, s, m, h or d")),
    };
    if secs <= 0.0 {
        return Err(format!("`{s}` must be positive"));
    }
    let range = || {
        format!(
            "between {:?} and {}h",
            MIN_DURATION,
            MAX_DURATION.as_secs() / 3600
        )
    };
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d < MIN_DURATION => Err(format!("`{s}` is too short, use a duration {}", range())),
        Ok(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(format!("`{s}` is too long, use a duration {}", range())),
    }
}

/// The largest size any key accepts (1 TiB); keys may bound it further.
pub const MAX_SIZE: u64 = 1 << 40;

/// `"256MiB"`, `"32MiB"`, `"1GiB"`, `"100MB"`, `"4096"`: from 1 byte to [`MAX_SIZE`].
pub fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => {
            return Err(format!(
                "`{s}`: unit must be B, KiB, MiB, GiB, KB, MB or GB"
            ))
        }
    };
    if num.is_empty() {
        return Err(format!("`{s}` is not a size like \"256MiB\""));
    }
    let too_large = || format!("`{s}` is too large, at most 1024GiB");
    // Only digits remain: a parse failure is an overflow.
    let n: u64 = num.parse().map_err(|_| too_large())?;
    let bytes = n.checked_mul(mult).ok_or_else(too_large)?;
    if bytes == 0 {
        return Err(format!("`{s}` must be positive"));
    }
    if bytes > MAX_SIZE {
        return Err(too_large());
    }
    usize::try_from(bytes).map_err(|_| too_large())
}

pub(super) fn percent_decode(s: &str) -> std::result::Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3).ok_or(())?).map_err(|_| ())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}
