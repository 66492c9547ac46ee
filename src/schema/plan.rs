//! A table's shape version checked against one TABLE_MAP: the row plan the
//! rows decoder reads that table id's events with, one [`Codec`] per column
//! (`types::codec`). The tracker makes plans; disagreement between the
//! binlog and the shape is an error with both shapes, never a guess.

use std::sync::Arc;

use mysql_common::binlog::events::TableMapEvent;
use mysql_common::constants::ColumnType;

use super::TableSchema;
use crate::types::codec::{codec_for, decimal_shape_is_valid, Codec};
use crate::types::metadata::{enum_set_labels, raw_field};
use crate::types::Charset;

/// A captured table's decode plan for one TABLE_MAP (one table id).
pub struct TablePlan {
    pub schema: Arc<TableSchema>,
    pub codecs: Vec<Codec>,
}

impl TablePlan {
    /// Checks the TABLE_MAP against the schema and fixes a codec per column.
    /// Disagreement is an error with both shapes: never a guess.
    pub fn new(schema: Arc<TableSchema>, tme: &TableMapEvent<'_>) -> Result<Self, String> {
        Self::with_compressed(schema, tme, &[])
    }

    /// [`TablePlan::new`] of a TABLE_MAP that
    /// [`crate::decode::compressed::plain_table_map`] rewrote: the columns at
    /// `compressed` hold MariaDB's compressed values.
    pub fn with_compressed(
        schema: Arc<TableSchema>,
        tme: &TableMapEvent<'_>,
        compressed: &[usize],
    ) -> Result<Self, String> {
        let count = tme.columns_count() as usize;
        if count != schema.columns.len() {
            return Err(format!(
                "the binlog has {count} columns ({}), the schema has {} ({})",
                binlog_shape(tme),
                schema.columns.len(),
                schema.describe()
            ));
        }
        let mut codecs = Vec::with_capacity(count);
        for (i, col) in schema.columns.iter().enumerate() {
            let ty = tme
                .get_raw_column_type(i)
                .map_err(|e| format!("column {}: {e}", col.name))?
                .ok_or_else(|| format!("column {}: missing type", col.name))?;
            let meta = tme.get_column_metadata(i).unwrap_or(&[]);
            if let (ColumnType::MYSQL_TYPE_NEWDECIMAL, [p, s, ..]) = (ty, meta) {
                if !decimal_shape_is_valid(*p, *s) {
                    return Err(format!(
                        "column `{}`: the TABLE_MAP gives DECIMAL precision {p} and scale {s}, \
                         which no server writes (precision 1 to 65, scale 0 to 30 and at most \
                         the precision): the binlog event is corrupt",
                        col.name
                    ));
                }
            }
            let codec = codec_for(ty, meta, &col.kind).ok_or_else(|| {
                format!(
                    "column `{}` is {} in the schema but {:?} in the binlog; binlog shape: {}; schema: {}",
                    col.name,
                    col.mysql_type,
                    ty,
                    binlog_shape(tme),
                    schema.describe()
                )
            })?;
            codecs.push(codec);
        }
        for &i in compressed {
            let name = schema.columns.get(i).map_or("?", |c| c.name.as_str());
            codecs[i] = match codecs[i].clone() {
                // A VARCHAR holds at most 65,535 bytes.
                Codec::Short { len_bytes, target } => Codec::Compressed {
                    len_bytes,
                    max_len: u16::MAX as usize,
                    target,
                },
                Codec::Long { len_bytes, target } => Codec::Compressed {
                    len_bytes,
                    max_len: usize::try_from((1u64 << (8 * len_bytes)) - 1).unwrap_or(usize::MAX),
                    target,
                },
                other => {
                    return Err(format!(
                        "column `{name}` is compressed in the binlog, which only a VARCHAR, TEXT or BLOB can be, but reads as {other:?}"
                    ))
                }
            };
        }
        use_binlog_labels(&schema, tme, &mut codecs)?;
        Ok(TablePlan { schema, codecs })
    }
}

/// With `binlog_row_metadata=FULL` the TABLE_MAP carries every ENUM and SET
/// column's labels as the server holds them; they replace the schema's.
/// The schema's may be wrong where this event is right: MariaDB's
/// `information_schema` (and SHOW CREATE TABLE) print a label outside the
/// Basic Multilingual Plane (an emoji) as `?`.
fn use_binlog_labels(
    schema: &TableSchema,
    tme: &TableMapEvent<'_>,
    codecs: &mut [Codec],
) -> Result<(), String> {
    use mysql_common::binlog::events::OptionalMetadataField as F;
    if !codecs
        .iter()
        .any(|c| matches!(c, Codec::Enum { .. } | Codec::Set { .. }))
    {
        return Ok(());
    }
    let (mut enums, mut sets) = (None, None);
    for field in tme.iter_optional_meta() {
        match field {
            Ok(F::EnumStrValue(v)) => enums = Some(enum_set_labels(&raw_field(&v))),
            Ok(F::SetStrValue(v)) => sets = Some(enum_set_labels(&raw_field(&v))),
            // Other fields, or metadata that cannot be read: the schema's labels stay.
            _ => {}
        }
    }
    let enums = enums
        .transpose()
        .map_err(|e| format!("TABLE_MAP ENUM labels: {e}"))?;
    let sets = sets
        .transpose()
        .map_err(|e| format!("TABLE_MAP SET labels: {e}"))?;
    let (mut enum_i, mut set_i) = (0, 0);
    for (codec, col) in codecs.iter_mut().zip(&schema.columns) {
        let (list, index, labels) = match codec {
            Codec::Enum { labels, .. } => (&enums, &mut enum_i, labels),
            Codec::Set { labels, .. } => (&sets, &mut set_i, labels),
            _ => continue,
        };
        *index += 1;
        let Some(raw) = list.as_ref().and_then(|l| l.get(*index - 1)) else {
            continue;
        };
        let charset = col
            .charset
            .as_deref()
            .and_then(Charset::from_mysql)
            .unwrap_or(Charset::Utf8);
        let decoded = raw
            .iter()
            .map(|bytes| {
                charset
                    .decode(bytes)
                    .map(|t| t.into_owned())
                    .map_err(|e| format!("column `{}`: TABLE_MAP label: {e}", col.name))
            })
            .collect::<Result<Vec<String>, String>>()?;
        if **labels != *decoded {
            *labels = Arc::from(decoded);
        }
    }
    Ok(())
}

fn binlog_shape(tme: &TableMapEvent<'_>) -> String {
    (0..tme.columns_count() as usize)
        .map(|i| match tme.get_column_type(i) {
            Ok(Some(t)) => format!("{t:?}"),
            _ => "?".to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::event_type;
    use crate::decode::testing::{event_bytes, read_event, table_map_body, table_schema};

    const TABLE_ID: u64 = 0x2A;

    fn plan_for(columns: &[(u8, &[u8])], schema: &[(&str, &str)]) -> Result<TablePlan, String> {
        let body = table_map_body(
            TABLE_ID,
            "shop",
            "items",
            columns,
            &vec![true; columns.len()],
        );
        let event = read_event(&event_bytes(event_type::TABLE_MAP, 0, &body, false), false);
        let tme: TableMapEvent<'_> = event.read_event().unwrap();
        TablePlan::new(table_schema(schema), &tme)
    }

    #[test]
    fn corrupt_column_metadata_is_an_error_naming_the_column() {
        // Issue 11: DECIMAL precision 0 panicked in the decoder.
        let err = plan_for(
            &[(3, &[]), (246, &[0, 0])],
            &[("id", "int"), ("d", "decimal(10,0)")],
        )
        .err()
        .unwrap();
        assert!(
            err.contains("column `d`") && err.contains("precision 0"),
            "{err}"
        );
        let err = plan_for(
            &[(3, &[]), (246, &[10, 40])],
            &[("id", "int"), ("d", "decimal(10,0)")],
        )
        .err()
        .unwrap();
        assert!(err.contains("scale 40"), "{err}");
        // Fractional digits above 6, a BIT width that is not the schema's,
        // a BLOB length prefix of 0 or 9 bytes: mismatches, not decoders.
        for (column, ty) in [
            ((18u8, &[7u8][..]), "datetime(6)"),
            ((16, &[0, 2]), "bit(8)"),
            ((252, &[0]), "blob"),
            ((252, &[9]), "blob"),
        ] {
            let err = plan_for(&[(3, &[]), column], &[("id", "int"), ("c", ty)])
                .err()
                .unwrap_or_else(|| panic!("{ty} with metadata {:?} was accepted", column.1));
            assert!(err.contains("column `c`"), "{err}");
        }
        assert!(plan_for(
            &[(3, &[]), (16, &[1, 1])],
            &[("id", "int"), ("c", "bit(9)")]
        )
        .is_ok());
    }
}
