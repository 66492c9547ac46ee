use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};

use super::*;
use crate::sink::testing::CountingStore;

/// `gallop` over a set of seqs, counting its probes.
async fn gallop_in(seqs: &BTreeSet<u64>, start: u64) -> (u64, u32) {
    let probes = AtomicU32::new(0);
    let found = gallop(start, |s| {
        probes.fetch_add(1, Ordering::Relaxed);
        let hit = seqs.contains(&s);
        async move { Ok(hit) }
    })
    .await
    .unwrap();
    (found, probes.into_inner())
}

#[tokio::test]
async fn gallop_finds_the_end_of_a_run_in_logarithmic_probes() {
    for (first, newest) in [
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 1_000),
        (7, 8),
        (5_000, 1_000_000),
    ] {
        let seqs: BTreeSet<u64> = (first..=newest).collect();
        for start in [first, (first + newest) / 2, newest] {
            let (found, probes) = gallop_in(&seqs, start).await;
            assert_eq!(found, newest, "run {first}..={newest} from {start}");
            let bound = 2 * (64 - (newest - start + 1).leading_zeros()) + 1;
            assert!(
                probes <= bound,
                "run {first}..={newest} from {start}: {probes} probes, more than {bound}"
            );
        }
    }
    // A current start costs one probe.
    let seqs: BTreeSet<u64> = (1..=1_000_000).collect();
    assert_eq!(gallop_in(&seqs, 1_000_000).await, (1_000_000, 1));
    // The last seq there is, without overflow.
    let top: BTreeSet<u64> = [u64::MAX - 1, u64::MAX].into();
    assert_eq!(gallop_in(&top, u64::MAX - 1).await.0, u64::MAX);
}

/// A lake of manifests `seqs` (their bodies do not matter to the look-up) in
/// a store that counts requests.
async fn lake_of(seqs: impl IntoIterator<Item = u64>) -> (Lake, Arc<CountingStore>) {
    let store = Arc::new(CountingStore {
        inner: Arc::new(InMemory::new()),
        requests: Default::default(),
    });
    for seq in seqs {
        store
            .inner
            .put(&manifest_path(seq), PutPayload::from_static(b"{}"))
            .await
            .unwrap();
    }
    (Lake::new(store.clone()), store)
}

async fn put_hint(store: &CountingStore, body: &'static [u8]) {
    store
        .inner
        .put(&Path::from(HINT_PATH), PutPayload::from_static(body))
        .await
        .unwrap();
}

const MANY: u64 = 20_000;

#[tokio::test]
async fn a_lake_of_an_earlier_release_is_probed_once_then_hinted() {
    let (lake, store) = lake_of(1..=MANY).await;
    let found = lake.newest_seq().await.unwrap();
    assert_eq!(found.seq, Some(MANY));
    assert_eq!(found.found_by, FoundBy::Probe);
    assert!(found.requests <= 40, "{found:?}");
    assert_eq!(store.requests.total(), found.requests);
    assert_eq!(store.requests.lists.load(Ordering::SeqCst), 1);
    assert_eq!(
        store.requests.listed.load(Ordering::SeqCst),
        0,
        "the confirming listing starts after the newest"
    );

    lake.write_hint(MANY).await;
    store.requests.reset();
    let found = lake.newest_seq().await.unwrap();
    assert_eq!(found.seq, Some(MANY));
    assert_eq!(found.found_by, FoundBy::Hint);
    assert!(found.hint_current);
    assert_eq!(found.requests, 3, "the hint, its manifest, the next one");
    assert_eq!(store.requests.total(), 3);
    assert_eq!(store.requests.lists.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_stale_hint_costs_a_longer_probe_never_a_wrong_answer() {
    let (lake, store) = lake_of(1..=MANY).await;
    lake.write_hint(10).await;
    store.requests.reset();
    let found = lake.newest_seq().await.unwrap();
    assert_eq!(found.seq, Some(MANY));
    assert_eq!(found.found_by, FoundBy::Hint);
    assert!(!found.hint_current);
    assert!(found.requests <= 32, "{found:?}");
    assert_eq!(store.requests.lists.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn without_manifest_1_the_probe_starts_at_the_first_listed() {
    // Retention took the oldest manifests, and the hint is gone, names one
    // of the deleted manifests, one past the newest, or is not readable.
    let hints: [Option<&'static [u8]>; 4] = [
        None,
        Some(b"{\"seq\":3}"),
        Some(b"{\"seq\":99999}"),
        Some(b"x"),
    ];
    for hint in hints {
        let (lake, store) = lake_of(5_001..=MANY).await;
        if let Some(body) = hint {
            put_hint(&store, body).await;
        }
        let found = lake.newest_seq().await.unwrap();
        assert_eq!(found.seq, Some(MANY), "hint {hint:?}");
        assert_eq!(found.found_by, FoundBy::Probe);
        assert_eq!(store.requests.lists.load(Ordering::SeqCst), 2);
        assert!(found.requests <= 40, "{found:?}");
    }
}

#[tokio::test]
async fn holes_left_by_cut_short_deletions_do_not_hide_the_newest() {
    // Deletions of 1..5,000 in parallel, cut short: a few survive.
    let survivors = [1, 2, 700, 4_096, 4_999];
    let (lake, store) = lake_of(survivors.into_iter().chain(5_001..=MANY)).await;
    let found = lake.newest_seq().await.unwrap();
    assert_eq!(found.seq, Some(MANY));
    // The listing after seq 2 (where the probe stops) names every survivor
    // and every manifest above them: only a lake in this state pays it.
    assert!(store.requests.listed.load(Ordering::SeqCst) > 0);
}

#[tokio::test]
async fn an_empty_lake_has_no_newest() {
    let (lake, store) = lake_of([]).await;
    let found = lake.newest_seq().await.unwrap();
    assert_eq!(found.seq, None);
    assert_eq!(
        store.requests.total(),
        3,
        "the hint, manifest 1, one listing"
    );
    let (lake, _) = lake_of([1]).await;
    assert_eq!(lake.newest_seq().await.unwrap().seq, Some(1));
}
