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
