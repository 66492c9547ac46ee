//! The `remove` tombstones a checkpoint keeps
//! (<https://github.com/delta-io/delta/blob/master/PROTOCOL.md#checkpoints>):
//! those younger than the table's `delta.deletedFileRetentionDuration`.
//! VACUUM (Spark, delta-rs) deletes a file no version in the retention
//! window names only if no tombstone it can see protects it; a checkpoint
//! without them would let it delete files that recent versions still read.

use serde_json::Value;

/// The table property that bounds how long removed files must stay.
pub const RETENTION_KEY: &str = "delta.deletedFileRetentionDuration";
/// Delta's default for [`RETENTION_KEY`]: one week.
pub const DEFAULT_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;

#[cfg(test)]
fn parse_interval(text: &str) -> Result<i64, String> {
    parse_property(RETENTION_KEY, text)
}

/// Milliseconds of a CalendarInterval string as Delta writes the property
/// `key` (its errors name it): `interval 7 days`, `interval 1 week 12
/// hours`, `168 hours` (the `interval` word is optional, as in Spark).
/// Months and years have no fixed length and are refused, as Delta refuses
/// them here.
pub fn parse_property(key: &str, text: &str) -> Result<i64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let mut words = lower.split_whitespace().peekable();
    if words.peek() == Some(&"interval") {
        words.next();
    }
    let bad = |why: &str| {
        format!("{key} = {text:?}: {why}; write it as Delta does, e.g. \"interval 7 days\"")
    };
    let mut total: i64 = 0;
    let mut terms = 0;
    while let Some(number) = words.next() {
        let n: i64 = number
            .parse()
            .map_err(|_| bad(&format!("{number:?} is not a whole number")))?;
        if n < 0 {
            return Err(bad("a retention cannot be negative"));
        }
        let unit = words.next().ok_or_else(|| bad("a number without a unit"))?;
        let per: i64 = match unit.strip_suffix('s').unwrap_or(unit) {
            "nanosecond" | "microsecond" => 0,
            "millisecond" => 1,
            "second" => 1000,
            "minute" => 60_000,
            "hour" => 3_600_000,
            "day" => 86_400_000,
            "week" => 7 * 86_400_000,
            "month" | "year" => return Err(bad("months and years have no fixed length")),
            _ => return Err(bad(&format!("unknown unit {unit:?}"))),
        };
        // Below a millisecond counts as a millisecond started.
        let ms = if per == 0 {
            (n > 0) as i64
        } else {
            n.checked_mul(per).ok_or_else(|| bad("too long"))?
        };
        total = total.checked_add(ms).ok_or_else(|| bad("too long"))?;
        terms += 1;
    }
    if terms == 0 {
        return Err(bad("no duration"));
    }
    Ok(total)
}

/// The retention of a table with `metadata` (a `metaData` action): its
/// property, else the default. `Err` names a property that does not parse.
pub fn retention_ms(metadata: Option<&Value>) -> Result<i64, String> {
    interval_property(metadata, RETENTION_KEY, DEFAULT_RETENTION_MS)
}

/// The interval property `key` of a table with `metadata`, else `default`.
pub fn interval_property(metadata: Option<&Value>, key: &str, default: i64) -> Result<i64, String> {
    match metadata
        .and_then(|m| m["configuration"][key].as_str())
        .filter(|s| !s.trim().is_empty())
    {
        Some(text) => parse_property(key, text),
        None => Ok(default),
    }
}

/// The tombstones (bodies of `remove` actions) a checkpoint written at
/// `now_ms` keeps: deleted within `retention_ms` (`None`: all of them, for a
/// retention that cannot be read). A tombstone without a deletion time is
/// kept: its age is unknown.
pub fn kept<'a>(
    tombstones: impl IntoIterator<Item = &'a Value>,
    now_ms: i64,
    retention_ms: Option<i64>,
) -> Vec<&'a Value> {
    tombstones
        .into_iter()
        .filter(|r| match (retention_ms, r["deletionTimestamp"].as_i64()) {
            (Some(keep), Some(at)) => at >= now_ms.saturating_sub(keep),
            _ => true,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn intervals_parse_as_delta_writes_them() {
        let day = 86_400_000;
        assert_eq!(parse_interval("interval 7 days"), Ok(7 * day));
        assert_eq!(parse_interval("INTERVAL 1 WEEK"), Ok(7 * day));
        assert_eq!(parse_interval("interval 1 day"), Ok(day));
        assert_eq!(parse_interval("168 hours"), Ok(7 * day));
        assert_eq!(
            parse_interval("  interval 1 day 12 hours 30 minutes "),
            Ok(day + 12 * 3_600_000 + 30 * 60_000)
        );
        assert_eq!(parse_interval("interval 90 seconds"), Ok(90_000));
        assert_eq!(parse_interval("interval 5 milliseconds"), Ok(5));
        assert_eq!(parse_interval("interval 0 hours"), Ok(0));
        assert_eq!(parse_interval("interval 3 microseconds"), Ok(1));
    }

    #[test]
    fn intervals_that_do_not_parse_say_why() {
        for (text, why) in [
            ("interval 1 month", "months and years have no fixed length"),
            ("interval 2 years", "months and years have no fixed length"),
            ("interval -1 days", "cannot be negative"),
            ("interval seven days", "\"seven\" is not a whole number"),
            ("interval 7", "a number without a unit"),
            ("interval 7 fortnights", "unknown unit \"fortnights\""),
            ("interval", "no duration"),
            ("interval 99999999999999 weeks", "too long"),
        ] {
            let e = parse_interval(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
            assert!(e.starts_with(RETENTION_KEY), "{e}");
            assert!(e.contains("\"interval 7 days\""), "{e}");
        }
    }

    #[test]
    fn the_retention_is_the_property_or_a_week() {
        assert_eq!(retention_ms(None), Ok(DEFAULT_RETENTION_MS));
        let md = |conf: Value| json!({"id": "x", "configuration": conf});
        assert_eq!(retention_ms(Some(&md(json!({})))), Ok(DEFAULT_RETENTION_MS));
        assert_eq!(
            retention_ms(Some(&md(json!({RETENTION_KEY: "interval 2 days"})))),
            Ok(2 * 86_400_000)
        );
        assert!(retention_ms(Some(&md(json!({RETENTION_KEY: "soon"})))).is_err());
    }

    #[test]
    fn checkpoints_keep_the_tombstones_younger_than_the_retention() {
        let now = 10 * DEFAULT_RETENTION_MS;
        let removed = |path: &str, at: Option<i64>| match at {
            Some(at) => json!({"path": path, "deletionTimestamp": at, "dataChange": true}),
            None => json!({"path": path, "dataChange": true}),
        };
        let all = [
            removed("old.parquet", Some(now - DEFAULT_RETENTION_MS - 1)),
            removed("edge.parquet", Some(now - DEFAULT_RETENTION_MS)),
            removed("recent.parquet", Some(now - 1000)),
            removed("undated.parquet", None),
        ];
        let paths = |kept: Vec<&Value>| -> Vec<String> {
            kept.iter()
                .map(|r| r["path"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            paths(kept(&all, now, Some(DEFAULT_RETENTION_MS))),
            ["edge.parquet", "recent.parquet", "undated.parquet"]
        );
        assert_eq!(
            paths(kept(&all, now, Some(2000))),
            ["recent.parquet", "undated.parquet"]
        );
        // A retention that cannot be read keeps every tombstone.
        assert_eq!(paths(kept(&all, now, None)).len(), 4);
    }
}
