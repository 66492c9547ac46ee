//! What a TABLE_MAP says of its columns beyond their type codes: the
//! optional metadata fields of `binlog_row_metadata=FULL` (ENUM and SET
//! labels here), written with MySQL's packed integers. Both the rows
//! decoder's plan and the shape derived from a TABLE_MAP read them.
//! Layout: <https://dev.mysql.com/doc/dev/mysql-server/latest/classmysql_1_1binlog_1_1event_1_1Table__map__event.html>

/// A MySQL packed integer (`net_field_length`) at the front of `r`, which
/// is advanced past it: one byte below 251, else 252, 253 or 254 followed by
/// 2, 3 or 8 little-endian bytes. `None` when truncated or on the NULL
/// marker 251 (never valid where this is used).
pub fn packed_int(r: &mut &[u8]) -> Option<u64> {
    let (&first, tail) = r.split_first()?;
    let width = match first {
        0..=250 => {
            *r = tail;
            return Some(first as u64);
        }
        252 => 2,
        253 => 3,
        254 => 8,
        _ => return None,
    };
    let mut le = [0u8; 8];
    le[..width].copy_from_slice(tail.get(..width)?);
    let v = u64::from_le_bytes(le);
    *r = &tail[width..];
    Some(v)
}

/// The ENUM or SET labels of TABLE_MAP's optional metadata (the raw bytes of
/// an ENUM_STR_VALUE or SET_STR_VALUE field): per column a packed count,
/// then that many packed-length strings. Read here rather than through
/// mysql_common, which reserves memory for the count before it checks it
/// against the bytes (a corrupt count panics or aborts).
pub fn enum_set_labels(mut raw: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, String> {
    let mut columns = Vec::new();
    while !raw.is_empty() {
        let count = packed_int(&mut raw).ok_or("ENUM/SET labels: count cut short")?;
        // Each label takes at least its one length byte.
        if count > raw.len() as u64 {
            return Err(format!(
                "ENUM/SET labels: {count} labels in {} bytes",
                raw.len()
            ));
        }
        let mut labels = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let len = packed_int(&mut raw).ok_or("ENUM/SET labels: length cut short")?;
            let label = raw
                .get(..usize::try_from(len).map_err(|_| "ENUM/SET labels: label too long")?)
                .ok_or("ENUM/SET labels: label cut short")?;
            labels.push(label.to_vec());
            raw = &raw[label.len()..];
        }
        columns.push(labels);
    }
    Ok(columns)
}

/// The bytes of an optional metadata field, as the event holds them.
pub fn raw_field(field: &impl mysql_common::proto::MySerialize) -> Vec<u8> {
    let mut raw = Vec::new();
    field.serialize(&mut raw);
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_set_labels_are_read_and_corrupt_counts_refused() {
        let raw = [2, 1, b'a', 2, 0xF0, 0x9F, 1, 0, 0];
        assert_eq!(
            enum_set_labels(&raw).unwrap(),
            vec![vec![b"a".to_vec(), vec![0xF0, 0x9F]], vec![vec![]], vec![]]
        );
        assert!(enum_set_labels(&[254, 255, 255, 255, 255, 255, 255, 255, 127]).is_err());
        assert!(enum_set_labels(&[1, 5, b'a']).is_err());
    }
}
