//! Lakes on a local path or on a real S3-compatible server (`moto_server`
//! from PyPI `moto[server]`, installed if missing, started per test on a free
//! loopback port). A test written against [`TestLake`] runs on both.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tempfile::TempDir;

use super::{
    free_port, keep_dirs, manifest_path, manifest_paths, strip_namespaces, Lake, MariaDb, Sluice,
};

/// Credentials moto accepts (it checks none); never real ones.
pub const TEST_ACCESS_KEY: &str = "sluice-test";
pub const TEST_SECRET_KEY: &str = "sluice-test-secret";
pub const TEST_REGION: &str = "us-east-1";

/// Installs `moto[server]` with pip unless `import moto.server` already works.
pub fn ensure_moto() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let present = Command::new("python3")
            .args(["-c", "import moto.server"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if present {
            return;
        }
        eprintln!("moto[server] missing: installing it with pip");
        let out = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "moto[server]"])
            .output()
            .expect("run python3 -m pip");
        assert!(
            out.status.success(),
            "pip install 'moto[server]' failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// A private `moto_server` (S3 API on plain HTTP), killed on drop.
pub struct MotoServer {
    dir: Option<TempDir>,
    child: Child,
    port: u16,
}

impl MotoServer {
    pub fn start() -> MotoServer {
        Self::start_with(false)
    }

    /// A moto_server that checks credentials (`INITIAL_NO_AUTH_ACTION_COUNT=0`):
    /// it knows no access key, so it answers every signed request 403
    /// `InvalidAccessKeyId` — and cannot hold a bucket.
    pub fn start_checking_credentials() -> MotoServer {
        Self::start_with(true)
    }

    fn start_with(check_credentials: bool) -> MotoServer {
        ensure_moto();
        let dir = tempfile::Builder::new()
            .prefix("sluice-moto-")
            .tempdir()
            .expect("temp dir");
        for attempt in 0.. {
            let port = free_port();
            let log = dir.path().join(format!("moto-{port}.log"));
            let file = File::create(&log).expect("create moto log");
            let mut child = Command::new("python3")
                .args(["-m", "moto.server", "-H", "127.0.0.1", "-p"])
                .arg(port.to_string())
                .current_dir(dir.path())
                .envs(check_credentials.then_some(("INITIAL_NO_AUTH_ACTION_COUNT", "0")))
                .stdin(Stdio::null())
                .stdout(file.try_clone().unwrap())
                .stderr(file)
                .spawn()
                .expect("spawn python3 -m moto.server");
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    let text = fs::read_to_string(&log).unwrap_or_default();
                    if attempt < 3 && text.contains("in use") {
                        break; // the port was taken meanwhile: try another
                    }
                    panic!("moto_server exited ({status}) during start-up:\n{text}");
                }
                // Checking credentials, it answers an unsigned request 500.
                if http(port, "GET", "/").is_ok_and(|s| s == 200 || check_credentials) {
                    return MotoServer {
                        dir: Some(dir),
                        child,
                        port,
                    };
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "moto_server not ready after 60 s:\n{}",
                        fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        unreachable!()
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn create_bucket(&self, bucket: &str) {
        let status = http(self.port, "PUT", &format!("/{bucket}")).expect("PUT bucket");
        assert_eq!(status, 200, "moto refused to create bucket {bucket}");
    }

    /// The S3 settings a sluice process gets from its environment.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", TEST_ACCESS_KEY.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", TEST_SECRET_KEY.to_owned()),
            ("AWS_REGION", TEST_REGION.to_owned()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// An object store on `bucket` for the test itself (no prefix).
    pub fn store(&self, bucket: &str) -> Arc<dyn ObjectStore> {
        Arc::new(
            AmazonS3Builder::new()
                .with_bucket_name(bucket)
                .with_endpoint(self.endpoint())
                .with_allow_http(true)
                .with_region(TEST_REGION)
                .with_access_key_id(TEST_ACCESS_KEY)
                .with_secret_access_key(TEST_SECRET_KEY)
                .build()
                .expect("build the test's S3 client"),
        )
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if keep_dirs() {
            if let Some(dir) = self.dir.take() {
                eprintln!("keeping moto dir {}", dir.keep().display());
            }
        }
    }
}

/// A bodiless HTTP/1.1 request to 127.0.0.1:`port`; the response status.
fn http(port: u16, method: &str, path: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:.200}")))
}

/// Where a test's lake lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Local,
    S3,
}

/// A lake for one test, on a local path or in a bucket of its own moto_server.
pub struct TestLake {
    pub backend: Backend,
    /// Local: the lake root. S3: a local copy, refreshed by every read.
    dir: TempDir,
    s3: Option<S3Lake>,
}

struct S3Lake {
    moto: MotoServer,
    bucket: String,
    prefix: String,
    /// The bucket, without the lake's prefix.
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
}

impl TestLake {
    pub fn new(backend: Backend) -> TestLake {
        let dir = tempfile::Builder::new()
            .prefix("sluice-lake-")
            .tempdir()
            .expect("temp dir");
        let s3 = (backend == Backend::S3).then(|| {
            let moto = MotoServer::start();
            let bucket = "sluice-lake".to_owned();
            moto.create_bucket(&bucket);
            let store = moto.store(&bucket);
            S3Lake {
                moto,
                bucket,
                // A prefix of two segments, so the test proves sluice honours it.
                prefix: "warehouse/cdc".to_owned(),
                store,
                rt: tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime"),
            }
        });
        TestLake { backend, dir, s3 }
    }

    pub fn sink_url(&self) -> String {
        match &self.s3 {
            Some(s3) => format!("s3://{}/{}", s3.bucket, s3.prefix),
            None => self.dir.path().display().to_string(),
        }
    }

    pub fn moto(&self) -> Option<&MotoServer> {
        self.s3.as_ref().map(|s| &s.moto)
    }

    /// A sidecar on this lake (see `Sluice::new`).
    pub fn sluice(&self, db: &MariaDb, state: &Path) -> Sluice {
        let mut sluice = Sluice::new(db, self.dir.path(), state);
        if let Some(s3) = &self.s3 {
            sluice.sink_url = self.sink_url();
            sluice.env = s3.moto.env();
        }
        sluice
    }

    /// S3: take the endpoint, region and plain-HTTP permission from `[sink]`
    /// keys instead of the environment (credentials stay in the environment).
    pub fn use_sink_keys(&self, sluice: &mut Sluice) {
        if let Some(s3) = &self.s3 {
            sluice.env.retain(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "AWS_ENDPOINT_URL" | "AWS_ALLOW_HTTP" | "AWS_REGION"
                )
            });
            sluice.extra_sink = format!(
                "endpoint = \"{}\"\nregion = \"{TEST_REGION}\"\nallow_http = true\n",
                s3.moto.endpoint()
            );
        }
    }

    fn key(s3: &S3Lake, rel: &str) -> ObjectPath {
        ObjectPath::from(format!("{}/{rel}", s3.prefix))
    }

    /// Relative paths (to the lake root) of every object, manifests included.
    fn objects(&self) -> BTreeSet<String> {
        let s3 = self.s3.as_ref().expect("S3 lake");
        let all: Vec<_> = s3
            .rt
            .block_on(s3.store.list(None).try_collect::<Vec<_>>())
            .expect("list the bucket");
        let root = format!("{}/", s3.prefix);
        all.into_iter()
            .map(|m| {
                let key = m.location.to_string();
                key.strip_prefix(&root)
                    .unwrap_or_else(|| {
                        panic!("object {key} is outside the lake prefix {root}: the prefix is not honoured")
                    })
                    .to_owned()
            })
            .collect()
    }

    pub fn manifest_count(&self) -> usize {
        match &self.s3 {
            None => manifest_paths(self.dir.path()).len(),
            Some(_) => self
                .objects()
                .iter()
                .filter(|p| p.starts_with("_sluice/manifests/") && p.ends_with(".json"))
                .count(),
        }
    }

    pub fn manifest_text(&self, seq: u64) -> Option<String> {
        match &self.s3 {
            None => fs::read_to_string(manifest_path(self.dir.path(), seq)).ok(),
            Some(s3) => {
                let key = Self::key(s3, &format!("_sluice/manifests/{seq:020}.json"));
                match s3
                    .rt
                    .block_on(async { s3.store.get(&key).await?.bytes().await })
                {
                    Ok(b) => Some(String::from_utf8(b.to_vec()).expect("manifest is UTF-8")),
                    Err(object_store::Error::NotFound { .. }) => None,
                    Err(e) => panic!("get {key}: {e}"),
                }
            }
        }
    }

    /// Writes a manifest as another writer would (overwriting).
    pub fn put_manifest(&self, seq: u64, text: &str) {
        match &self.s3 {
            None => fs::write(manifest_path(self.dir.path(), seq), text).unwrap(),
            Some(s3) => {
                let key = Self::key(s3, &format!("_sluice/manifests/{seq:020}.json"));
                s3.rt
                    .block_on(s3.store.put(&key, PutPayload::from(text.to_owned())))
                    .unwrap_or_else(|e| panic!("put {key}: {e}"));
            }
        }
    }

    /// Writes objects (paths relative to the lake root), overwriting; on S3
    /// 32 at a time.
    pub fn put_objects(&self, objects: Vec<(String, Vec<u8>)>) {
        use futures::StreamExt;
        match &self.s3 {
            None => {
                for (rel, body) in objects {
                    let dest = self.dir.path().join(&rel);
                    fs::create_dir_all(dest.parent().unwrap()).unwrap();
                    fs::write(&dest, body).unwrap_or_else(|e| panic!("write {rel}: {e}"));
                }
            }
            Some(s3) => {
                let puts = futures::stream::iter(objects.into_iter().map(|(rel, body)| {
                    let key = Self::key(s3, &rel);
                    async move {
                        s3.store
                            .put(&key, PutPayload::from(body))
                            .await
                            .unwrap_or_else(|e| panic!("put {key}: {e}"));
                    }
                }))
                .buffer_unordered(32)
                .collect::<Vec<()>>();
                s3.rt.block_on(puts);
            }
        }
    }

    /// Deletes objects (paths relative to the lake root); one missing is fine.
    pub fn delete_objects(&self, rels: &[String]) {
        for rel in rels {
            match &self.s3 {
                None => {
                    let _ = fs::remove_file(self.dir.path().join(rel));
                }
                Some(s3) => {
                    let key = Self::key(s3, rel);
                    match s3.rt.block_on(s3.store.delete(&key)) {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => panic!("delete {key}: {e}"),
                    }
                }
            }
        }
    }

    /// Data files (everything outside `_sluice/` and the tables' `_delta_log/`),
    /// relative to the lake root.
    pub fn data_files(&self) -> BTreeSet<String> {
        match &self.s3 {
            None => super::data_files(self.dir.path()),
            Some(_) => self
                .objects()
                .into_iter()
                .filter(|p| !p.split('/').any(|part| part.starts_with('_')))
                .map(|p| strip_namespaces(&p).into_owned())
                .collect(),
        }
    }

    /// The local lake root, or for S3 a fresh local copy of every object.
    pub fn local_root(&self) -> PathBuf {
        let Some(s3) = &self.s3 else {
            return self.dir.path().to_owned();
        };
        let root = self.dir.path();
        for entry in fs::read_dir(root).expect("read the mirror dir") {
            let path = entry.unwrap().path();
            if path.is_dir() {
                fs::remove_dir_all(&path).unwrap();
            } else {
                fs::remove_file(&path).unwrap();
            }
        }
        for rel in self.objects() {
            let key = Self::key(s3, &rel);
            let bytes = s3
                .rt
                .block_on(async { s3.store.get(&key).await?.bytes().await })
                .unwrap_or_else(|e| panic!("get {key}: {e}"));
            let dest = root.join(&rel);
            fs::create_dir_all(dest.parent().unwrap()).unwrap();
            fs::write(&dest, &bytes).unwrap();
        }
        root.to_owned()
    }

    /// `Lake::read` on this lake (S3: on a fresh local copy).
    pub fn read(&self) -> Lake {
        Lake::read(&self.local_root())
    }

    /// `Lake::read_committed` on this lake (S3: on a fresh local copy).
    pub fn read_committed(&self) -> Lake {
        Lake::read_committed(&self.local_root())
    }
}

impl Drop for TestLake {
    fn drop(&mut self) {
        if keep_dirs() {
            eprintln!("keeping lake dir {}", self.dir.path().display());
            let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
            let _ = dir.keep();
        }
    }
}
