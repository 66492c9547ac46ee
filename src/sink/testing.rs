//! A store that misbehaves on purpose, for the unit tests of the sink and
//! the commit protocol.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// What goes wrong. The counters count down: `lost_answers = 2` loses the
/// answers of the next two put-if-absent calls.
#[derive(Debug, Default)]
pub struct Faults {
    /// put-if-absent answers "not implemented".
    pub refuse_create: bool,
    /// put-if-absent overwrites, as a store without conditional writes does.
    pub ignore_create: bool,
    /// put-if-absent writes the object, then the answer is lost.
    pub lost_answers: AtomicU32,
    /// put-if-absent fails without an answer and writes nothing.
    pub failed_creates: AtomicU32,
    /// get fails without an answer.
    pub failed_gets: AtomicU32,
    /// The first put whose path contains `.0` first writes `.2` at `.1`:
    /// another writer that got there in between.
    pub race: std::sync::Mutex<Option<(String, Path, bytes::Bytes)>>,
}

#[derive(Debug)]
pub struct FaultyStore {
    pub inner: Arc<dyn ObjectStore>,
    pub faults: Faults,
}

/// A request that got no answer, as object_store reports a cut connection.
fn no_answer() -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultyStore",
        source: "connection closed before message completed".into(),
    }
}

/// Takes one from `n` if it is above zero.
fn take(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
        .is_ok()
}

impl std::fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FaultyStore")
    }
}

#[async_trait::async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        mut opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let race =
            self.faults.race.lock().ok().and_then(|mut r| {
                r.take_if(|(part, ..)| location.as_ref().contains(part.as_str()))
            });
        if let Some((_, at, bytes)) = race {
            self.inner
                .put_opts(&at, bytes.into(), PutOptions::default())
                .await?;
        }
        if matches!(opts.mode, PutMode::Create) {
            if self.faults.refuse_create {
                return Err(object_store::Error::NotImplemented {
                    operation: "put_opts with PutMode::Create".into(),
                    implementer: self.to_string(),
                });
            }
            if self.faults.ignore_create {
                opts.mode = PutMode::Overwrite;
            }
            if take(&self.faults.failed_creates) {
                return Err(no_answer());
            }
            if take(&self.faults.lost_answers) {
                self.inner.put_opts(location, payload, opts).await?;
                return Err(no_answer());
            }
        }
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if take(&self.faults.failed_gets) {
            return Err(no_answer());
        }
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Requests a store was asked, by kind: what a look-up costs.
#[derive(Debug, Default)]
pub struct Requests {
    /// GET and HEAD (a HEAD is a GET without the body).
    pub gets: AtomicU32,
    pub puts: AtomicU32,
    /// Listings started, of any kind.
    pub lists: AtomicU32,
    /// Names the listings yielded (S3 answers 1,000 a request).
    pub listed: Arc<AtomicU32>,
}

impl Requests {
    pub fn total(&self) -> u32 {
        self.gets.load(Ordering::SeqCst)
            + self.puts.load(Ordering::SeqCst)
            + self.lists.load(Ordering::SeqCst)
    }

    pub fn reset(&self) {
        for n in [&self.gets, &self.puts, &self.lists, &*self.listed] {
            n.store(0, Ordering::SeqCst);
        }
    }
}

/// A store that counts the requests made to it.
#[derive(Debug)]
pub struct CountingStore {
    pub inner: Arc<dyn ObjectStore>,
    pub requests: Requests,
}

impl CountingStore {
    fn counted(
        &self,
        listing: BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        use futures::StreamExt;
        self.requests.lists.fetch_add(1, Ordering::SeqCst);
        let listed = self.requests.listed.clone();
        listing
            .inspect(move |_| {
                listed.fetch_add(1, Ordering::SeqCst);
            })
            .boxed()
    }
}

impl std::fmt::Display for CountingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CountingStore")
    }
}

#[async_trait::async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.requests.puts.fetch_add(1, Ordering::SeqCst);
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.requests.puts.fetch_add(1, Ordering::SeqCst);
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.requests.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.counted(self.inner.list(prefix))
    }
    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.counted(self.inner.list_with_offset(prefix, offset))
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.requests.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
