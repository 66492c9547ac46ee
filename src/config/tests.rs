use super::*;

const MINIMAL: &str = r#"
[source]
url = "mysql://repl@127.0.0.1:3307"
server_id = 7
[sink]
url = "/tmp/lake"
"#;

#[test]
fn minimal_config_gets_documented_defaults() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.source.port, 3307);
    assert_eq!(c.source.user, "repl");
    assert_eq!(c.source.start, StartPosition::Latest);
    assert_eq!(c.flush.max_rows, 500_000);
    assert_eq!(c.flush.max_buffer_bytes, 96 << 20);
    assert_eq!(c.flush.interval, Duration::from_secs(10));
    assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(c.state_dir, PathBuf::from("./sluice-state"));
}

#[test]
fn http_keys_have_defaults_and_name_the_key() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.http.listen, None);
    assert_eq!(c.http.ready_max_lag, Duration::from_secs(60));
    assert_eq!(c.http.stall_timeout, Duration::from_secs(300));
    let c = Config::parse(&format!(
            "{MINIMAL}[http]\nlisten = \"127.0.0.1:9464\"\nready_max_lag = \"5s\"\nstall_timeout = \"1m\"\n"
        ))
        .unwrap();
    assert_eq!(c.http.listen.as_deref(), Some("127.0.0.1:9464"));
    assert_eq!(c.http.ready_max_lag, Duration::from_secs(5));
    assert_eq!(c.http.stall_timeout, Duration::from_secs(60));
    let off = Config::parse(&format!("{MINIMAL}[http]\nlisten = \"\"\n")).unwrap();
    assert_eq!(off.http.listen, None);
    for (toml, key) in [
        ("listen = \"9464\"", "http.listen: "),
        ("listen = \"host:port\"", "http.listen: "),
        ("listen = \":9464\"", "http.listen: "),
        ("ready_max_lag = \"soon\"", "http.ready_max_lag: "),
        ("stall_timeout = \"0s\"", "http.stall_timeout: "),
    ] {
        let e = Config::parse(&format!("{MINIMAL}[http]\n{toml}\n")).unwrap_err();
        assert!(e.starts_with(key), "{toml}: {e}");
    }
    let e = Config::parse(&format!("{MINIMAL}[http]\nlisten_on = \"x\"\n")).unwrap_err();
    assert!(e.contains("listen_on"), "{e}");
}

#[test]
fn unknown_key_is_named() {
    let text = format!("{MINIMAL}[flush]\nmax_rowz = 5\n");
    let err = Config::parse(&text).unwrap_err();
    assert!(err.contains("max_rowz"), "{err}");
    assert!(!err.contains('\n'));
}

#[test]
fn start_position_forms() {
    let text = MINIMAL.replace(
        "server_id = 7",
        "server_id = 7\nstart = { file = \"binlog.000002\", pos = 1234 }",
    );
    let c = Config::parse(&text).unwrap();
    assert_eq!(
        c.source.start,
        StartPosition::At {
            file: "binlog.000002".into(),
            pos: 1234
        }
    );
    let bad = MINIMAL.replace("server_id = 7", "server_id = 7\nstart = \"yesterday\"");
    assert!(Config::parse(&bad).unwrap_err().contains("source.start"));
}

#[test]
fn gtid_timestamp_and_resume() {
    let with = |line: &str| {
        Config::parse(&MINIMAL.replace("server_id = 7", &format!("server_id = 7\n{line}")))
    };
    let c = with("start = { gtid = \"0-1-100,1-2-7\" }").unwrap();
    assert_eq!(c.source.start, StartPosition::Gtid("0-1-100,1-2-7".into()));
    let c = with("start = { timestamp = \"2026-01-31T12:00:00+01:00\" }").unwrap();
    let StartPosition::Timestamp(t) = c.source.start else {
        panic!("{:?}", c.source.start)
    };
    assert_eq!(t.to_rfc3339(), "2026-01-31T11:00:00+00:00");
    // A TOML datetime literal works as well as a string.
    let c = with("start = { timestamp = 2026-01-31T12:00:00Z }").unwrap();
    assert!(matches!(c.source.start, StartPosition::Timestamp(_)));
    let e = with("start = { gtid = \"0-1\" }").unwrap_err();
    assert!(e.starts_with("source.start.gtid: "), "{e}");
    let e = with("start = { timestamp = \"yesterday\" }").unwrap_err();
    assert!(e.starts_with("source.start.timestamp: "), "{e}");
    let e = with("start = { gtid = \"0-1-1\", pos = 4 }").unwrap_err();
    assert!(e.contains("cannot be combined"), "{e}");

    assert_eq!(Config::parse(MINIMAL).unwrap().source.resume, Resume::Auto);
    assert_eq!(
        with("resume = \"gtid\"").unwrap().source.resume,
        Resume::Gtid
    );
    assert_eq!(
        with("resume = \"position\"").unwrap().source.resume,
        Resume::Position
    );
    let e = with("resume = \"sometimes\"").unwrap_err();
    assert!(e.starts_with("source.resume: "), "{e}");
}

#[test]
fn tls_modes_and_their_files() {
    let with = |lines: &str| {
        Config::parse(&MINIMAL.replace("server_id = 7", &format!("server_id = 7\n{lines}")))
    };
    let tls = Config::parse(MINIMAL).unwrap().source.tls;
    assert_eq!(tls.mode, TlsMode::Preferred);
    assert_eq!((tls.ca_file, tls.client_identity), (None, None));
    for (name, mode) in [
        ("disabled", TlsMode::Disabled),
        ("preferred", TlsMode::Preferred),
        ("required", TlsMode::Required),
    ] {
        assert_eq!(
            with(&format!("tls = \"{name}\"")).unwrap().source.tls.mode,
            mode
        );
        assert_eq!(mode.name(), name);
    }
    let e = with("tls = \"on\"").unwrap_err();
    assert!(e.starts_with("source.tls: `on` is not a mode"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ca.pem");
    std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\n").unwrap();
    let p = pem.display();
    let e = with("tls = \"verify_ca\"").unwrap_err();
    assert!(e.starts_with("source.ca_file: missing"), "{e}");
    let c = with(&format!("tls = \"verify_identity\"\nca_file = '{p}'")).unwrap();
    assert_eq!(c.source.tls.mode, TlsMode::VerifyIdentity);
    assert_eq!(c.source.tls.ca_file.as_deref(), Some(pem.as_path()));
    let e = with("tls = \"verify_ca\"\nca_file = '/nonexistent/ca.pem'").unwrap_err();
    assert!(
        e.starts_with("source.ca_file: cannot read /nonexistent/ca.pem"),
        "{e}"
    );
    let e = with(&format!("tls = \"disabled\"\nca_file = '{p}'")).unwrap_err();
    assert!(
        e.starts_with("source.ca_file: set while source.tls = \"disabled\""),
        "{e}"
    );
    let e = with(&format!("cert_file = '{p}'")).unwrap_err();
    assert!(e.starts_with("source.key_file: missing"), "{e}");
    let c = with(&format!(
        "tls = \"required\"\ncert_file = '{p}'\nkey_file = '{p}'"
    ))
    .unwrap();
    assert_eq!(
        c.source.tls.client_identity,
        Some((pem.clone(), pem.clone()))
    );
}

#[test]
fn binlog_dir_makes_the_url_optional() {
    let dir = std::env::temp_dir();
    let text = MINIMAL.replace(
        "url = \"mysql://repl@127.0.0.1:3307\"",
        &format!("binlog_dir = '{}'", dir.display()),
    );
    let c = Config::parse(&text).unwrap();
    assert!(!c.source.has_server());
    assert_eq!(c.source.binlog_dir.as_deref(), Some(dir.as_path()));
    let none = MINIMAL.replace("url = \"mysql://repl@127.0.0.1:3307\"", "");
    assert!(Config::parse(&none)
        .unwrap_err()
        .starts_with("source.url: missing"));
    let missing = MINIMAL.replace(
        "url = \"mysql://repl@127.0.0.1:3307\"",
        "binlog_dir = '/no/such/dir'",
    );
    let e = Config::parse(&missing).unwrap_err();
    assert!(
        e.starts_with("source.binlog_dir: ") && e.contains("not a directory"),
        "{e}"
    );
}

#[test]
fn sizes_and_durations() {
    assert_eq!(parse_size("32MiB").unwrap(), 32 << 20);
    assert_eq!(parse_size("1GB").unwrap(), 1_000_000_000);
    assert!(parse_size("12 parsecs").is_err());
    assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
    assert_eq!(
        parse_duration("7d").unwrap(),
        Duration::from_secs(7 * 86_400)
    );
    assert!(parse_duration("8d").is_err());
    assert!(parse_duration("0s").is_err());
}

#[test]
fn the_example_config_parses() {
    let c = Config::parse(include_str!("../../conf/local.toml")).unwrap();
    assert_eq!(
        c.sink.location,
        LakeLocation::Local("/var/lib/sluice/lake".into())
    );
    assert_eq!(c.sink.multipart_threshold, DEFAULT_MULTIPART_THRESHOLD);
    assert_eq!(c.retention.manifests, Duration::from_secs(7 * 86_400));
}

#[test]
fn sink_url_forms() {
    let loc = |u: &str| parse_lake_url(u);
    assert_eq!(
        loc("/var/lake").unwrap(),
        LakeLocation::Local("/var/lake".into())
    );
    assert_eq!(
        loc("file:///var/lake").unwrap(),
        LakeLocation::Local("/var/lake".into())
    );
    assert_eq!(
        loc("s3://bkt/a/b/").unwrap(),
        LakeLocation::S3 {
            bucket: "bkt".into(),
            prefix: "a/b".into()
        }
    );
    assert_eq!(
        loc("s3://bkt").unwrap(),
        LakeLocation::S3 {
            bucket: "bkt".into(),
            prefix: "".into()
        }
    );
    assert_eq!(
        loc("gs://b/p").unwrap(),
        LakeLocation::Gcs {
            bucket: "b".into(),
            prefix: "p".into()
        }
    );
    assert_eq!(
        loc("az://c/p").unwrap(),
        LakeLocation::Azure {
            container: "c".into(),
            prefix: "p".into()
        }
    );
    for bad in [
        "s3:///p",
        "hdfs://x/y",
        "s3://b/a//c",
        "s3://b/../c",
        "file://rel",
        "",
    ] {
        let err = loc(bad).unwrap_err();
        assert!(err.starts_with("sink.url: "), "{bad}: {err}");
    }
}

#[test]
fn sink_keys() {
    let s3 = MINIMAL.replace("url = \"/tmp/lake\"", "url = \"s3://bkt/lake\"");
    let c = Config::parse(&s3).unwrap();
    assert_eq!(c.sink.s3, S3Overrides::default());
    assert_eq!(c.sink.multipart_threshold, 16 << 20);
    let text = format!(
            "{s3}endpoint = \"http://127.0.0.1:9000\"\nregion = \"eu-west-1\"\nallow_http = true\nmultipart_threshold = \"64MiB\"\n"
        );
    let c = Config::parse(&text).unwrap();
    assert_eq!(
        c.sink.s3,
        S3Overrides {
            endpoint: Some("http://127.0.0.1:9000".into()),
            region: Some("eu-west-1".into()),
            allow_http: Some(true),
        }
    );
    assert_eq!(c.sink.multipart_threshold, 64 << 20);
    let err = Config::parse(&format!("{s3}endpont = \"x\"\n")).unwrap_err();
    assert!(err.contains("endpont"), "{err}");
    let err = Config::parse(&format!("{MINIMAL}region = \"eu-west-1\"\n")).unwrap_err();
    assert!(err.starts_with("sink.region: "), "{err}");
    let err = Config::parse(&format!("{s3}endpoint = \"ftp://x\"\n")).unwrap_err();
    assert!(err.starts_with("sink.endpoint: "), "{err}");
    let err = Config::parse(&format!("{s3}multipart_threshold = \"1MiB\"\n")).unwrap_err();
    assert!(err.starts_with("sink.multipart_threshold: "), "{err}");
    assert_eq!(c.sink.requests_in_flight, 32);
    let c = Config::parse(&format!("{s3}requests_in_flight = 1\n")).unwrap();
    assert_eq!(c.sink.requests_in_flight, 1);
    for bad in ["0", "-3", "1025"] {
        let err = Config::parse(&format!("{s3}requests_in_flight = {bad}\n")).unwrap_err();
        assert!(
            err.starts_with("sink.requests_in_flight: ") && err.contains("1 to 1024"),
            "{err}"
        );
    }
    let err = Config::parse(&format!("{s3}requests_in_flight = \"32\"\n")).unwrap_err();
    assert!(err.contains("requests_in_flight"), "{err}");
}

#[test]
fn out_of_range_durations_are_errors_naming_the_key() {
    let top = |line: &str| Config::parse(&format!("{line}\n{MINIMAL}"));
    let e = top("shutdown_timeout = \"99999999999999999999999h\"").unwrap_err();
    assert!(
        e.starts_with("shutdown_timeout: ") && e.contains("too long"),
        "{e}"
    );
    let flush = |line: &str| Config::parse(&format!("{MINIMAL}[flush]\n{line}\n"));
    let e = flush("interval = \"0.0000000001s\"").unwrap_err();
    assert!(
        e.starts_with("flush.interval: ") && e.contains("too short"),
        "{e}"
    );
    let e = flush("interval = \"1e-10s\"").unwrap_err();
    assert!(e.starts_with("flush.interval: "), "{e}");
    assert_eq!(
        flush("interval = \"1ms\"").unwrap().flush.interval,
        MIN_DURATION
    );
    assert_eq!(
        flush("interval = \"168h\"").unwrap().flush.interval,
        MAX_DURATION
    );
    let e = flush("max_buffer_bytes = \"0\"").unwrap_err();
    assert!(e.starts_with("flush.max_buffer_bytes: "), "{e}");
    let e = flush("max_buffer_bytes = \"99999999999999999999999GiB\"").unwrap_err();
    assert!(
        e.starts_with("flush.max_buffer_bytes: ") && e.contains("too large"),
        "{e}"
    );
    let sink = |line: &str| Config::parse(&format!("{MINIMAL}{line}\n"));
    let e = sink("multipart_threshold = \"6GiB\"").unwrap_err();
    assert!(e.starts_with("sink.multipart_threshold: "), "{e}");
    let source = |line: &str| {
        Config::parse(&MINIMAL.replace("server_id = 7", &format!("server_id = 7\n{line}")))
    };
    let e = source("max_sql_bytes = \"0B\"").unwrap_err();
    assert!(e.starts_with("source.max_sql_bytes: "), "{e}");
    let e = source("max_sql_bytes = \"2GiB\"").unwrap_err();
    assert!(e.starts_with("source.max_sql_bytes: "), "{e}");
}

#[test]
fn snapshot_keys_have_defaults_and_bounds() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(
        c.snapshot,
        SnapshotConfig {
            initial: true,
            chunk_rows: 20_000,
            method: SnapshotMethod::Auto,
            new_tables: NewTables::Snapshot,
            after_ddl: AfterDdl::Reread,
        }
    );
    let snap = |body: &str| Config::parse(&format!("{MINIMAL}[snapshot]\n{body}\n"));
    let c = snap("mode = \"never\"\nchunk_rows = 7\nmethod = \"consistent\"").unwrap();
    assert_eq!(
        c.snapshot,
        SnapshotConfig {
            initial: false,
            chunk_rows: 7,
            method: SnapshotMethod::Consistent,
            new_tables: NewTables::Skip,
            after_ddl: AfterDdl::Reread,
        }
    );
    let c = snap("method = \"watermark\"").unwrap();
    assert_eq!(c.snapshot.method, SnapshotMethod::Watermark);
    let c = snap("new_tables = \"skip\"").unwrap();
    assert_eq!(c.snapshot.new_tables, NewTables::Skip);
    let c = snap("mode = \"never\"\nnew_tables = \"snapshot\"").unwrap();
    assert_eq!(c.snapshot.new_tables, NewTables::Snapshot);
    let c = snap("after_ddl = \"never\"").unwrap();
    assert_eq!(c.snapshot.after_ddl, AfterDdl::Never);
    let c = snap("after_ddl = \"reread\"").unwrap();
    assert_eq!(c.snapshot.after_ddl, AfterDdl::Reread);
    for (body, key) in [
        ("mode = \"sometimes\"", "snapshot.mode: "),
        ("chunk_rows = 0", "snapshot.chunk_rows: "),
        ("chunk_rows = 10000001", "snapshot.chunk_rows: "),
        ("method = \"fast\"", "snapshot.method: "),
        ("new_tables = \"always\"", "snapshot.new_tables: "),
        ("after_ddl = \"sometimes\"", "snapshot.after_ddl: "),
        ("after_ddl = true", "snapshot"),
        ("new_table = \"skip\"", "snapshot"),
    ] {
        let e = snap(body).unwrap_err();
        assert!(e.starts_with(key), "{body}: {e}");
    }
}

#[test]
fn current_keys_have_defaults_and_errors_name_them() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(
        c.current,
        CurrentConfig {
            enabled: true,
            refresh: Duration::from_secs(60),
            target_file_bytes: 128 << 20,
            deletion_vectors: true,
            purge_threshold: 0.3,
        }
    );
    let cur = |body: &str| Config::parse(&format!("{MINIMAL}[current]\n{body}\n"));
    let c = cur("enabled = false\nrefresh = \"5s\"\ntarget_file_size = \"64KiB\"\ndeletion_vectors = \"never\"\npurge_threshold = 0.5").unwrap();
    assert_eq!(
        c.current,
        CurrentConfig {
            enabled: false,
            refresh: Duration::from_secs(5),
            target_file_bytes: 64 << 10,
            deletion_vectors: false,
            purge_threshold: 0.5,
        }
    );
    for (body, key) in [
        ("refresh = \"soon\"", "current.refresh: "),
        ("refresh = \"0s\"", "current.refresh: "),
        ("target_file_size = \"12\"", "current.target_file_size: "),
        ("target_file_size = \"lots\"", "current.target_file_size: "),
        ("enabled = \"yes\"", "current.enabled"),
        (
            "deletion_vectors = \"always\"",
            "current.deletion_vectors: ",
        ),
        ("purge_threshold = 0.0", "current.purge_threshold: "),
        ("purge_threshold = 1.5", "current.purge_threshold: "),
        ("refrsh = \"1m\"", "refrsh"),
    ] {
        let e = cur(body).unwrap_err();
        assert!(e.contains(key), "{body}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn compaction_keys_have_defaults_and_errors_name_them() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(
        c.compaction,
        CompactionConfig {
            enabled: true,
            target_file_bytes: 128 << 20,
            min_age: Duration::from_secs(600),
        }
    );
    let comp = |body: &str| Config::parse(&format!("{MINIMAL}[compaction]\n{body}\n"));
    let c = comp("enabled = false\ntarget_file_size = \"64KiB\"\nmin_age = \"1s\"").unwrap();
    assert_eq!(
        c.compaction,
        CompactionConfig {
            enabled: false,
            target_file_bytes: 64 << 10,
            min_age: Duration::from_secs(1),
        }
    );
    for (body, key) in [
        ("min_age = \"soon\"", "compaction.min_age: "),
        ("min_age = \"0s\"", "compaction.min_age: "),
        ("target_file_size = \"12\"", "compaction.target_file_size: "),
        (
            "target_file_size = \"lots\"",
            "compaction.target_file_size: ",
        ),
        ("enabled = \"yes\"", "compaction.enabled"),
        ("min_agee = \"1m\"", "min_agee"),
    ] {
        let e = comp(body).unwrap_err();
        assert!(e.contains(key), "{body}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn type_errors_name_the_key() {
    let cases = [
        (
            MINIMAL.replace("server_id = 7", "server_id = \"seven\""),
            "source.server_id: ",
        ),
        (
            MINIMAL.replace("server_id = 7", "server_id = -7"),
            "source.server_id: ",
        ),
        (
            format!("{MINIMAL}[flush]\nmax_rows = -1\n"),
            "flush.max_rows: ",
        ),
        (
            format!("{MINIMAL}[flush]\ninterval = 10\n"),
            "flush.interval: ",
        ),
        (
            format!("{MINIMAL}allow_http = \"yes\"\n"),
            "sink.allow_http: ",
        ),
        (
            format!("shutdown_timeout = 30\n{MINIMAL}"),
            "shutdown_timeout: ",
        ),
        (MINIMAL.replace("server_id = 7\n", ""), "source: "),
    ];
    for (text, key) in cases {
        let e = Config::parse(&text).unwrap_err();
        assert!(e.starts_with(key), "{key}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

/// Seeded random strings for every duration and size key: parsing never
/// panics, an accepted value is within the key's bounds, and a refused
/// one is a single line naming the key.
#[test]
fn random_duration_and_size_values_never_panic() {
    use rand::{Rng, SeedableRng};
    enum Kind {
        Duration,
        Size { min: usize, max: usize },
    }
    let keys = [
        ("shutdown_timeout", Kind::Duration),
        ("source.connect_timeout", Kind::Duration),
        ("source.heartbeat", Kind::Duration),
        ("flush.interval", Kind::Duration),
        (
            "source.max_sql_bytes",
            Kind::Size {
                min: 1,
                max: MAX_SQL_BYTES,
            },
        ),
        (
            "sink.multipart_threshold",
            Kind::Size {
                min: 5 << 20,
                max: MAX_SINGLE_PUT,
            },
        ),
        (
            "flush.max_buffer_bytes",
            Kind::Size {
                min: 1 << 20,
                max: MAX_SIZE as usize,
            },
        ),
    ];
    const PIECES: &[&str] = &[
        "0",
        "1",
        "5",
        "9",
        ".",
        "..",
        "e",
        "E",
        "-",
        "+",
        " ",
        "\t",
        "_",
        "ms",
        "s",
        "m",
        "h",
        "d",
        "B",
        "KiB",
        "MiB",
        "GiB",
        "KB",
        "MB",
        "GB",
        "TiB",
        "inf",
        "NaN",
        "µs",
        "∞",
        "0x",
        "1e-10",
        "99999999999999999999",
        "18446744073709551616",
        "0.0000001",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x51ce);
    let mut accepted = [0usize; 7];
    for case in 0..3000 {
        let mut value = String::new();
        if rng.gen_bool(0.5) {
            // Shaped like a value: digits, maybe a fraction, a unit.
            const UNITS: &[&str] = &[
                "", "ms", "s", "m", "h", "B", "KiB", "MiB", "GiB", "KB", "MB", "GB",
            ];
            let digits = rng.gen_range(1..=12);
            value.extend((0..digits).map(|_| char::from(b'0' + rng.gen_range(0..10))));
            if rng.gen_bool(0.3) {
                value.push('.');
                value.push(char::from(b'0' + rng.gen_range(0..10)));
            }
            value.push_str(UNITS[rng.gen_range(0..UNITS.len())]);
        }
        for _ in 0..rng.gen_range(0..=4) {
            if rng.gen_bool(0.3) {
                let digits = rng.gen_range(1..=25);
                value.extend((0..digits).map(|_| char::from(b'0' + rng.gen_range(0..10))));
            } else {
                value.push_str(PIECES[rng.gen_range(0..PIECES.len())]);
            }
        }
        let quoted = toml::Value::String(value.clone()).to_string();
        for (k, (key, kind)) in keys.iter().enumerate() {
            let (section, name) = key.split_once('.').unwrap_or(("", key));
            let line = format!("{name} = {quoted}");
            let text = match section {
                "" => format!("{line}\n{MINIMAL}"),
                "source" => MINIMAL.replace("server_id = 7", &format!("server_id = 7\n{line}")),
                "sink" => format!("{MINIMAL}{line}\n"),
                _ => format!("{MINIMAL}[{section}]\n{line}\n"),
            };
            let parsed = Config::parse(&text);
            let c = match parsed {
                Err(e) => {
                    assert!(
                        e.starts_with(&format!("{key}: ")) && !e.contains('\n'),
                        "case {case}, {key} = {quoted}: {e}"
                    );
                    continue;
                }
                Ok(c) => c,
            };
            accepted[k] += 1;
            match kind {
                Kind::Duration => {
                    let d = match *key {
                        "shutdown_timeout" => c.shutdown_timeout,
                        "source.connect_timeout" => c.source.connect_timeout,
                        "source.heartbeat" => c.source.heartbeat,
                        _ => c.flush.interval,
                    };
                    assert!(
                        (MIN_DURATION..=MAX_DURATION).contains(&d),
                        "case {case}, {key} = {quoted} gave {d:?}"
                    );
                    assert_eq!(parse_duration(&value), Ok(d));
                }
                Kind::Size { min, max } => {
                    let n = match *key {
                        "source.max_sql_bytes" => c.source.max_sql_bytes,
                        "sink.multipart_threshold" => c.sink.multipart_threshold,
                        _ => c.flush.max_buffer_bytes,
                    };
                    assert!(
                        (*min..=*max).contains(&n),
                        "case {case}, {key} = {quoted} gave {n}"
                    );
                    assert_eq!(parse_size(&value), Ok(n));
                }
            }
        }
    }
    // The generator reaches both outcomes for every key.
    for ((key, _), n) in keys.iter().zip(accepted) {
        assert!(n > 10 && n < 3000, "{key}: {n} of 3000 accepted");
    }
}

#[test]
fn filter_is_anchored() {
    let f = TableFilter::new(&[r"shop\..*".into()], &[r"shop\.tmp_.*".into()]).unwrap();
    assert!(f.captures("shop", "orders"));
    assert!(!f.captures("shop", "tmp_x"));
    assert!(!f.captures("myshop", "orders"));
    assert!(!f.captures("shopping", "x"));
}

/// `[[columns]]` entries appended to the minimal config.
fn with_columns(entries: &str) -> std::result::Result<Config, String> {
    Config::parse(&format!("{MINIMAL}{entries}"))
}

#[test]
fn column_policies_parse_in_file_order() {
    use crate::config::policy::PolicyAction;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("column.key");
    std::fs::write(&key, "s3cret-key\nignored second line\n").unwrap();
    let c = with_columns(&format!(
        "[column_key]\nfile = '{}'\n\
         [[columns]]\nmatch = 'shop\\.users\\.email'\naction = \"hash\"\n\
         [[columns]]\nmatch = 'shop\\.users\\.ssn'\naction = \"exclude\"\n\
         [[columns]]\nmatch = 'shop\\..*\\.phone'\naction = \"mask\"\n\
         [[columns]]\nmatch = 'shop\\.users\\.name'\naction = {{ truncate = 4 }}\n",
        key.display()
    ))
    .unwrap();
    let actions: Vec<_> = c.columns.rules.iter().map(|r| r.action).collect();
    assert_eq!(
        actions,
        vec![
            PolicyAction::Hash,
            PolicyAction::Exclude,
            PolicyAction::Mask,
            PolicyAction::Truncate(4)
        ]
    );
    assert_eq!(
        c.columns.key.as_ref().map(|k| k.bytes().to_vec()),
        Some(b"s3cret-key".to_vec())
    );
    // Anchored on the whole name, without case.
    let rule = |db, t, col| c.columns.rule_for(db, t, col).map(|r| r.entry);
    assert_eq!(rule("shop", "users", "EMAIL"), Some(1));
    assert_eq!(rule("shop", "users", "email2"), None);
    assert_eq!(rule("shop", "orders", "phone"), Some(3));
    // No printing of the configuration shows the key.
    assert!(!format!("{c:?}").contains("s3cret"));
    assert!(Config::parse(MINIMAL).unwrap().columns.is_empty());
}

#[test]
fn column_policy_errors_name_the_entry_in_one_line() {
    let two = |second: &str| {
        format!("[[columns]]\nmatch = 'shop\\.t\\.a'\naction = \"mask\"\n[[columns]]\n{second}\n")
    };
    for (entries, message) in [
        (
            two("match = 'shop\\.('\naction = \"mask\""),
            "[[columns]] entry 2: match: bad regex `shop\\.(`: unclosed group",
        ),
        (
            two("match = 'shop\\.t\\.b'\naction = \"blur\""),
            "[[columns]] entry 2: action: `blur` is not an action, use \"exclude\", \"hash\", \"mask\" or { truncate = N }",
        ),
        (
            two("match = 'shop\\.t\\.b'\naction = { blur = 3 }"),
            "[[columns]] entry 2: action: `blur` is not an action, use \"exclude\", \"hash\", \"mask\" or { truncate = N }",
        ),
        (
            two("match = 'shop\\.t\\.b'\naction = { truncate = 0 }"),
            "[[columns]] entry 2: action: truncate = 0 is out of range, keep at least 1 character",
        ),
        (
            two("match = 'shop\\.t\\.b'\naction = { truncate = \"4\" }"),
            "[[columns]] entry 2: action: truncate takes a number, e.g. { truncate = 4 }",
        ),
        (
            two("match = 'shop\\.t\\.b'\naction = \"hash\""),
            "[[columns]] entry 2: action \"hash\" needs a key; set SLUICE_COLUMN_KEY or [column_key] file",
        ),
    ] {
        if std::env::var_os(COLUMN_KEY_ENV).is_some() && message.contains("needs a key") {
            continue;
        }
        let e = with_columns(&entries).unwrap_err();
        assert_eq!(e, message);
    }
    let e = with_columns("[[columns]]\nmatches = 'x'\naction = \"mask\"\n").unwrap_err();
    assert!(e.contains("matches") && !e.contains('\n'), "{e}");
    let e = with_columns("[column_key]\nfile = '/nonexistent/sluice.key'\n").unwrap_err();
    assert!(
        e.starts_with("column_key.file: cannot read /nonexistent/sluice.key: "),
        "{e}"
    );
}
