//! XA transactions: prepared in one place of the binlog, committed or rolled
//! back in another, possibly much later and after other transactions.
//!
//! How the servers log a two-phase XA transaction:
//! - the prepared part is a group of its own: MariaDB's GTID event with the
//!   `FL_PREPARED_XA` flag (MySQL: GTID, then `XA START`), the rows,
//!   `XA END`, and an XA_PREPARE event that ends the group;
//! - the outcome is another group: `XA COMMIT xid` or `XA ROLLBACK xid`.
//!
//! The rows of a prepared transaction are not committed on the source until
//! its `XA COMMIT`: sluice writes them to held files under `_sluice/xa/`,
//! which the manifests list under `xa_prepared` (so a restart between the
//! two keeps them), and at `XA COMMIT` copies them into the table folders
//! with `_seq` and `_tx_seq` taken at the commit, so replay order stays
//! commit order. `XA ROLLBACK` drops them. `XA COMMIT … ONE PHASE` is an
//! ordinary transaction.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::record_batch::RecordBatch;
use object_store::path::Path;

use crate::error::{Error, Result};

/// Held files live under this prefix, never in the table folders.
pub const XA_PREFIX: &str = "_sluice/xa/";

/// Where a held file of a prepared transaction is written: named, like data
/// files, for the checkpoint it is written for, so that clean-up can tell
/// which may still be committed (see `Lake::remove_orphans`).
pub fn held_file_path(checkpoint: u64, writer: &str, n: u64, db: &str, table: &str) -> Path {
    Path::from_iter([
        "_sluice".to_string(),
        "xa".to_string(),
        format!("{checkpoint:020}-{writer}-{n:08}"),
        db.to_string(),
        format!("{table}.parquet"),
    ])
}

/// The XA id of an XA_PREPARE event body: one_phase u8, formatID u32,
/// gtrid_length u32, bqual_length u32, then gtrid and bqual.
pub fn prepare_xid(body: &[u8]) -> Option<String> {
    let u32_at = |at: usize| -> Option<u32> {
        body.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let format_id = u32_at(1)?;
    let gtrid_len = u32_at(5)? as usize;
    let bqual_len = u32_at(9)? as usize;
    let gtrid = body.get(13..13usize.checked_add(gtrid_len)?)?;
    let bqual = body.get(13 + gtrid_len..(13 + gtrid_len).checked_add(bqual_len)?)?;
    Some(canonical_xid(gtrid, bqual, format_id as i64))
}

fn canonical_xid(gtrid: &[u8], bqual: &[u8], format_id: i64) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02X}")).collect::<String>();
    format!("X'{}',X'{}',{format_id}", hex(gtrid), hex(bqual))
}

/// `XA START` / `XA BEGIN` (MySQL logs it; MariaDB flags its GTID event).
pub fn is_xa_start(statement: &str) -> bool {
    let upper = statement.trim_start().to_ascii_uppercase();
    upper.starts_with("XA START") || upper.starts_with("XA BEGIN")
}

/// The outcome a statement gives an XA transaction.
#[derive(Debug, PartialEq, Eq)]
pub enum XaOutcome {
    Commit { xid: String, one_phase: bool },
    Rollback { xid: String },
}

/// Reads `XA COMMIT xid [ONE PHASE]` and `XA ROLLBACK xid`, with the xid in
/// any form the server accepts (`X'hex'` or a quoted string, optional bqual
/// and formatID), into the canonical form of [`prepare_xid`].
pub fn xa_outcome(statement: &str) -> Option<XaOutcome> {
    let s = statement.trim();
    let upper = s.to_ascii_uppercase();
    let (commit, rest) = if upper.starts_with("XA COMMIT") {
        (true, &s["XA COMMIT".len()..])
    } else if upper.starts_with("XA ROLLBACK") {
        (false, &s["XA ROLLBACK".len()..])
    } else {
        return None;
    };
    let mut r = rest.trim_start();
    let gtrid = xid_part(&mut r)?;
    let mut bqual = Vec::new();
    let mut format_id = 1i64;
    if let Some(after) = r.trim_start().strip_prefix(',') {
        r = after.trim_start();
        bqual = xid_part(&mut r)?;
        if let Some(after) = r.trim_start().strip_prefix(',') {
            let t = after.trim_start();
            let end = t
                .find(|c: char| !(c.is_ascii_digit() || c == '-'))
                .unwrap_or(t.len());
            format_id = t[..end].parse().ok()?;
            r = &t[end..];
        }
    }
    let one_phase = r.trim().to_ascii_uppercase().starts_with("ONE PHASE");
    let xid = canonical_xid(&gtrid, &bqual, format_id);
    Some(if commit {
        XaOutcome::Commit { xid, one_phase }
    } else {
        XaOutcome::Rollback { xid }
    })
}

/// One part of an xid: `X'hex'`, `0xhex`, or a quoted string.
fn xid_part(r: &mut &str) -> Option<Vec<u8>> {
    let s = *r;
    if let Some(hex) = s.strip_prefix("X'").or_else(|| s.strip_prefix("x'")) {
        let end = hex.find('\'')?;
        let bytes = decode_hex(&hex[..end])?;
        *r = &hex[end + 1..];
        return Some(bytes);
    }
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        let end = hex
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(hex.len());
        let bytes = decode_hex(&hex[..end])?;
        *r = &hex[end..];
        return Some(bytes);
    }
    let quote = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let mut out = String::new();
    let mut chars = s[1..].char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == quote {
            if chars.peek().map(|(_, n)| *n) == Some(quote) {
                chars.next();
                out.push(quote);
                continue;
            }
            *r = &s[1 + i + 1..];
            return Some(out.into_bytes());
        }
        if c == '\\' {
            if let Some((_, n)) = chars.next() {
                out.push(n);
            }
            continue;
        }
        out.push(c);
    }
    None
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The held rows with `_seq` from `first_seq` on and `_tx_seq` = `tx_seq`:
/// their place in the stream is the `XA COMMIT`.
pub fn resequence(batch: &RecordBatch, first_seq: i64, tx_seq: i64) -> Result<RecordBatch> {
    let n = batch.num_rows() as i64;
    let schema = batch.schema();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    for (name, array) in [
        (
            "_seq",
            Arc::new(Int64Array::from_iter_values(first_seq..first_seq + n)) as ArrayRef,
        ),
        (
            "_tx_seq",
            Arc::new(Int64Array::from_iter_values(std::iter::repeat_n(
                tx_seq, n as usize,
            ))),
        ),
    ] {
        let (i, _) = schema
            .column_with_name(name)
            .ok_or_else(|| Error::Lake(format!("a held XA file without a {name} column")))?;
        columns[i] = array;
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, StringArray};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    #[test]
    fn prepare_event_and_statements_name_the_same_xid() {
        // The XA_PREPARE body MariaDB 10.11 wrote for XA START 'x1'.
        let body = [0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, b'x', b'1'];
        let xid = prepare_xid(&body).unwrap();
        assert_eq!(xid, "X'7831',X'',1");
        for (stmt, one_phase) in [
            ("XA COMMIT X'7831',X'',1", false),
            ("xa commit 'x1'", false),
            ("XA COMMIT 'x1', '', 1 ONE PHASE", true),
            ("XA COMMIT 0x7831", false),
        ] {
            assert_eq!(
                xa_outcome(stmt),
                Some(XaOutcome::Commit {
                    xid: xid.clone(),
                    one_phase
                }),
                "{stmt}"
            );
        }
        assert_eq!(
            xa_outcome("XA ROLLBACK X'6162',X'63',7"),
            Some(XaOutcome::Rollback {
                xid: "X'6162',X'63',7".into()
            })
        );
        assert_eq!(xa_outcome("XA END X'7831',X'',1"), None);
        assert_eq!(prepare_xid(&body[..14]), None, "cut body");
        assert_eq!(
            prepare_xid(&[0, 1, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0]),
            None
        );
    }

    #[test]
    fn resequence_replaces_seq_and_tx_seq_only() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Utf8, false),
            Field::new("_seq", DataType::Int64, false),
            Field::new("_tx_seq", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a", "b"])),
                Arc::new(Int64Array::from(vec![3, 4])),
                Arc::new(Int64Array::from(vec![1, 1])),
            ],
        )
        .unwrap();
        let out = resequence(&batch, 100, 9).unwrap();
        assert_eq!(
            out.column(1).as_primitive::<Int64Type>().values(),
            &[100, 101]
        );
        assert_eq!(out.column(2).as_primitive::<Int64Type>().values(), &[9, 9]);
        assert_eq!(out.column(0).as_string::<i32>().value(1), "b");
    }
}
