use super::*;

fn column(name: &str, collation: Option<&str>) -> KeyColumn {
    KeyColumn {
        name: name.into(),
        collation: collation.map(|c| ("utf8mb4".into(), c.into())),
        numeric: false,
        decimal: None,
        binary: false,
    }
}

#[test]
fn a_renamed_key_column_keeps_the_order_and_another_key_does_not() {
    let id = [column("id", None)];
    let renamed = [column("item_id", None)];
    let text = [column("id", Some("utf8mb4_general_ci"))];
    let recollated = [column("id", Some("utf8mb4_bin"))];
    let wider = [column("id", None), column("n", None)];
    assert!(same_order(Some(&id), Some(&renamed)));
    assert!(!same_order(Some(&id), Some(&text)));
    assert!(!same_order(Some(&text), Some(&recollated)));
    assert!(!same_order(Some(&id), Some(&wider)));
    assert!(!same_order(Some(&id), None));
    assert!(same_order(None, None));
}

#[test]
fn chunk_retries_back_off_to_at_most_two_and_a_half_seconds() {
    let waits: Vec<Duration> = (1..=MAX_CHUNK_RETRIES).map(retry_delay).collect();
    assert!(waits[0] >= Duration::from_millis(30) && waits[0] <= Duration::from_millis(50));
    assert!(waits.iter().all(|w| *w <= Duration::from_millis(2500)));
    let total: Duration = waits.iter().sum();
    assert!(
        total >= Duration::from_secs(30),
        "{total:?}: bounded, but long enough for a DDL to finish"
    );
}

#[test]
fn a_snapshot_resumed_after_a_stop_goes_on_only_under_a_key_of_the_same_order() {
    let id = [column("id", None)];
    let saved = key_orders(&id);
    assert_eq!(saved[0].order, "value");
    let after = [KeyValue::Int(7)];
    // The same key, or the key column renamed: go on after the last key.
    assert!(resumes_under(Some(&saved), Some(&id), Some(&after)));
    assert!(resumes_under(
        Some(&saved),
        Some(&[column("item_id", None)]),
        Some(&after)
    ));
    // Another order, another width, or no key any more: start over.
    let text = [column("id", Some("utf8mb4_general_ci"))];
    assert_eq!(key_orders(&text)[0].order, "utf8mb4/utf8mb4_general_ci");
    assert!(!resumes_under(Some(&saved), Some(&text), Some(&after)));
    let wider = [column("id", None), column("n", None)];
    assert!(!resumes_under(Some(&saved), Some(&wider), Some(&after)));
    assert!(!resumes_under(Some(&saved), None, Some(&after)));
    // A manifest of an earlier release has no key: the widths must agree.
    assert!(resumes_under(None, Some(&id), Some(&after)));
    assert!(!resumes_under(None, Some(&wider), Some(&after)));
}
