//! The sink against a real S3-compatible server (moto_server): the URL's
//! prefix is honoured, large files go up in parts, and put-if-absent works.
mod common;

use common::*;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use sluice::config::Config;
use sluice::sink;

fn s3_config(moto: &MotoServer, url: &str) -> Config {
    Config::parse(&format!(
        "[source]\nurl = \"mysql://repl@127.0.0.1:3306\"\nserver_id = 9\n\
         [sink]\nurl = \"{url}\"\nendpoint = \"{}\"\nregion = \"{TEST_REGION}\"\nallow_http = true\n",
        moto.endpoint()
    ))
    .unwrap_or_else(|e| panic!("config: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_prefix_multipart_and_put_if_absent() {
    // Credentials come from the environment only (the same for every test here).
    std::env::set_var("AWS_ACCESS_KEY_ID", TEST_ACCESS_KEY);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", TEST_SECRET_KEY);
    let moto = tokio::task::spawn_blocking(MotoServer::start)
        .await
        .unwrap();
    moto.create_bucket("objects");
    let config = s3_config(&moto, "s3://objects/some/lake");
    let store = sink::open_store(&config.sink).unwrap();
    let bucket = moto.store("objects");

    sink::probe_put_if_absent(store.as_ref(), &config.sink.url)
        .await
        .expect("moto honours If-None-Match: *");

    let threshold = config.sink.multipart_threshold;
    for (name, len) in [
        ("small", 1000),
        ("large", threshold + 3 * sink::PART_SIZE / 2),
    ] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
        let path = Path::from(format!("db/t/{name}.parquet"));
        let written = sink::put_file(store.as_ref(), &path, bytes.clone(), threshold)
            .await
            .unwrap();
        assert_eq!(written, len as u64);
        let key = Path::from(format!("some/lake/db/t/{name}.parquet"));
        let got = bucket.get(&key).await.unwrap();
        let etag = got.meta.e_tag.clone().unwrap_or_default();
        assert_eq!(
            got.bytes().await.unwrap().as_ref(),
            bytes.as_slice(),
            "{name}"
        );
        // S3 gives a multipart object an ETag ending in -<number of parts>.
        let parts = len.div_ceil(sink::PART_SIZE);
        if len >= threshold {
            assert!(
                etag.ends_with(&format!("-{parts}\"")),
                "{name}: ETag {etag}"
            );
        } else {
            assert!(!etag.contains('-'), "{name}: ETag {etag}");
        }
    }

    let create = || PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let m = Path::from("_sluice/manifests/00000000000000000001.json");
    store
        .put_opts(&m, PutPayload::from_static(b"{}"), create())
        .await
        .unwrap();
    let again = store
        .put_opts(&m, PutPayload::from_static(b"[]"), create())
        .await;
    assert!(
        matches!(again, Err(object_store::Error::AlreadyExists { .. })),
        "second put-if-absent: {again:?}"
    );
    let probes: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(bucket.list(None))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.location.to_string())
        .collect();
    assert_eq!(
        probes,
        vec![
            "some/lake/_sluice/manifests/00000000000000000001.json",
            "some/lake/db/t/large.parquet",
            "some/lake/db/t/small.parquet",
        ],
        "everything under the prefix, the probe object gone"
    );
}

/// What object_store 0.14 returns for each way a store or a network fails,
/// produced for real (moto_server, and the fault proxy in front of it), and
/// how sluice classifies it: the answers that will not change are definite
/// and name the problem, the rest are transient. The client here has no
/// retries of its own, so every fault reaches the caller.
#[test]
fn store_errors_are_classified_as_moto_and_a_faulty_network_produce_them() {
    use common::proxy::{Fault, FaultProxy, Rule};
    use object_store::aws::AmazonS3Builder;
    use object_store::{ClientOptions, ObjectStore, RetryConfig};
    use sluice::error::store::{explain, is_transient};
    use std::sync::Arc;
    use std::time::Duration;

    let moto = MotoServer::start();
    moto.create_bucket("lake");
    let proxy = FaultProxy::start(moto.port());
    let checking = MotoServer::start_checking_credentials();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = |endpoint: String, bucket: &str| -> Arc<dyn ObjectStore> {
        Arc::new(
            AmazonS3Builder::new()
                .with_bucket_name(bucket)
                .with_endpoint(endpoint)
                .with_region(TEST_REGION)
                .with_access_key_id(TEST_ACCESS_KEY)
                .with_secret_access_key(TEST_SECRET_KEY)
                .with_client_options(
                    ClientOptions::new()
                        .with_allow_http(true)
                        .with_timeout(Duration::from_secs(1)),
                )
                .with_retry(RetryConfig {
                    max_retries: 0,
                    ..Default::default()
                })
                .build()
                .unwrap(),
        )
    };
    let via_proxy = client(proxy.endpoint(), "lake");
    let create = || PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let put = |store: &Arc<dyn ObjectStore>, key: &str| {
        rt.block_on(store.put_opts(&Path::from(key), PutPayload::from_static(b"x"), create()))
            .expect_err("the put must fail")
    };

    // Transient: the store did not answer, or answered 5xx / 429.
    for (n, fault) in [
        Fault::Status(500),
        Fault::Status(503),
        Fault::Status(429),
        Fault::Drop,
        Fault::Garbage,
        Fault::Stall(Duration::from_secs(3)),
    ]
    .into_iter()
    .enumerate()
    {
        proxy.set_rules(vec![Rule::every("PUT", "/lake/", 1, fault)]);
        let e = put(&via_proxy, &format!("t/{n}"));
        assert!(
            matches!(e, object_store::Error::Generic { .. }),
            "{fault:?}: {e:?}"
        );
        assert!(is_transient(&e), "{fault:?} must be transient: {e}");
        assert!(explain(&e).starts_with("unavailable ("), "{}", explain(&e));
        assert_eq!(proxy.hits(fault), 1, "{fault:?} was not injected");
    }
    // The answers lost after forwarding: the objects are there.
    proxy.pass();
    for n in [3, 4, 5] {
        let head = rt.block_on(via_proxy.head(&Path::from(format!("t/{n}"))));
        assert!(head.is_ok(), "t/{n}: {head:?}");
    }
    // Put-if-absent of an object that exists: AlreadyExists (412 from moto).
    let e = put(&via_proxy, "t/3");
    assert!(
        matches!(e, object_store::Error::AlreadyExists { .. }),
        "{e:?}"
    );

    // Definite: 403 AccessDenied.
    proxy.set_rules(vec![Rule::every("", "/lake", 1, Fault::Status(403))]);
    // A 403 is PermissionDenied, definite, and its line says what and how.
    let assert_denied = |e: object_store::Error, start: &str, fix: &str| {
        assert!(
            matches!(e, object_store::Error::PermissionDenied { .. }),
            "{e:?}"
        );
        assert!(!is_transient(&e));
        let line = explain(&e);
        assert!(line.starts_with(start) && line.contains(fix), "{line}");
    };
    assert_denied(
        put(&via_proxy, "t/denied"),
        "access denied (HTTP 403 AccessDenied",
        "s3:PutObject",
    );
    proxy.pass();

    // Definite: the bucket does not exist (moto: 404 NoSuchBucket), for a
    // put, a get and a listing alike.
    let no_bucket = client(moto.endpoint(), "no-such-bucket");
    let e = put(&no_bucket, "t/1");
    assert!(matches!(e, object_store::Error::NotFound { .. }), "{e:?}");
    let got = rt
        .block_on(no_bucket.get(&Path::from("t/1")))
        .map(|_| ())
        .unwrap_err();
    let listed = rt
        .block_on(futures::TryStreamExt::try_collect::<Vec<_>>(
            no_bucket.list(None),
        ))
        .map(|_| ())
        .unwrap_err();
    for e in [e, got, listed] {
        assert!(!is_transient(&e), "{e}");
        let line = explain(&e);
        assert!(
            line.starts_with("the bucket does not exist (HTTP 404 NoSuchBucket")
                && line.contains("[sink] url"),
            "{line}"
        );
    }

    // Definite: credentials the store does not know (moto checking them:
    // 403 InvalidAccessKeyId).
    assert_denied(
        put(&client(checking.endpoint(), "lake"), "t/1"),
        "the store does not accept the credentials (HTTP 403 InvalidAccessKeyId",
        "AWS_ACCESS_KEY_ID",
    );
    drop(rt);
}
