//! The changelog supertype (DESIGN.md "The Delta logs stay right"): a
//! changelog column has one Delta type for all its files, the least common
//! supertype of every lake type the column has had, and every old value is
//! rendered in it without loss. The lattice, from the lake's types
//! (DESIGN.md "Types"):
//!
//! - integers of any width: the widest; with a DECIMAL, a DECIMAL with the
//!   integer digits of both and the larger scale (BIGINT beside BIGINT
//!   UNSIGNED: DECIMAL(20,0)); more than 38 digits: STRING;
//! - any number with FLOAT or DOUBLE: DOUBLE (FLOAT beside FLOAT stays);
//! - dates, times, timestamps, booleans, lists and numbers mixed: STRING,
//!   each value as its text (a number in decimal, a date in ISO 8601, a
//!   SET as `a,b` as MySQL shows it);
//! - anything beside a string: STRING; anything beside bytes: BINARY (text
//!   as its UTF-8 bytes);
//! - structs (`_before`) field by field.
//!
//! [`convert`] takes a column to a supertype of its type and cannot lose a
//! value; a pair it does not know is an error naming both types, which the
//! tests below provoke for every pair of the lattice (none may fail).
//! [`narrow`] goes back, for the current tables, which keep the source's
//! current type: a value that does not parse in it becomes null.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryBuilder, GenericListArray, OffsetSizeTrait, StringBuilder, StructArray,
};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, Fields};
use arrow::util::display::{ArrayFormatter, FormatOptions};

/// The kind of a lake type in the lattice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An integer with this many decimal digits.
    Int(u8),
    Decimal(u8, i8),
    Float32,
    Float64,
    Utf8,
    Binary,
    Struct,
    /// Booleans, dates, times, timestamps, lists: equal only to the same type.
    Other,
}

fn kind(t: &DataType) -> Kind {
    match t {
        DataType::Int8 | DataType::UInt8 => Kind::Int(3),
        DataType::Int16 | DataType::UInt16 => Kind::Int(5),
        DataType::Int32 | DataType::UInt32 => Kind::Int(10),
        DataType::Int64 => Kind::Int(19),
        DataType::UInt64 => Kind::Decimal(20, 0),
        DataType::Decimal128(p, s) if *s >= 0 => Kind::Decimal(*p, *s),
        DataType::Float32 => Kind::Float32,
        DataType::Float16 | DataType::Float64 => Kind::Float64,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Kind::Utf8,
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => Kind::Binary,
        DataType::Dictionary(_, v) => kind(v),
        DataType::Struct(_) => Kind::Struct,
        _ => Kind::Other,
    }
}

/// The type of a kind, where it stands for one.
fn of_kind(k: Kind) -> Option<DataType> {
    Some(match k {
        Kind::Int(d) if d <= 3 => DataType::Int8,
        Kind::Int(d) if d <= 5 => DataType::Int16,
        Kind::Int(d) if d <= 10 => DataType::Int32,
        Kind::Int(_) => DataType::Int64,
        Kind::Decimal(p, s) => DataType::Decimal128(p, s),
        Kind::Float32 => DataType::Float32,
        Kind::Float64 => DataType::Float64,
        Kind::Utf8 => DataType::Utf8,
        Kind::Binary => DataType::Binary,
        Kind::Struct | Kind::Other => return None,
    })
}

/// Whether two types are one Delta type (the same values, stored alike).
fn same(a: &DataType, b: &DataType) -> bool {
    super::schema::delta_type(a) == super::schema::delta_type(b)
}

/// The least common supertype of two lake types. Of two types Delta holds
/// alike, `b` (the newer) is kept.
pub fn supertype(a: &DataType, b: &DataType) -> DataType {
    if let (DataType::Struct(x), DataType::Struct(y)) = (a, b) {
        let mut fields: Vec<Field> = x.iter().map(|f| f.as_ref().clone()).collect();
        merge_fields(&mut fields, y);
        return DataType::Struct(fields.into());
    }
    if same(a, b) {
        return b.clone();
    }
    let (ka, kb) = (kind(a), kind(b));
    let joined = match (ka, kb) {
        (Kind::Binary, _) | (_, Kind::Binary) => Kind::Binary,
        (Kind::Utf8, _) | (_, Kind::Utf8) => Kind::Utf8,
        (Kind::Int(x), Kind::Int(y)) => Kind::Int(x.max(y)),
        (Kind::Float32, Kind::Float32) => Kind::Float32,
        (Kind::Float32 | Kind::Float64, x) | (x, Kind::Float32 | Kind::Float64) if numeric(x) => {
            Kind::Float64
        }
        (Kind::Int(d), Kind::Decimal(p, s)) | (Kind::Decimal(p, s), Kind::Int(d)) => {
            decimal(d as i16, 0, p as i16 - s as i16, s)
        }
        (Kind::Decimal(p1, s1), Kind::Decimal(p2, s2)) => {
            decimal(p1 as i16 - s1 as i16, s1, p2 as i16 - s2 as i16, s2)
        }
        _ => Kind::Utf8,
    };
    of_kind(joined).unwrap_or(DataType::Utf8)
}

fn numeric(k: Kind) -> bool {
    matches!(
        k,
        Kind::Int(_) | Kind::Decimal(..) | Kind::Float32 | Kind::Float64
    )
}

/// The DECIMAL that holds `int1` integer digits with scale `s1` and `int2`
/// with `s2`; STRING past Delta's 38 digits.
fn decimal(int1: i16, s1: i8, int2: i16, s2: i8) -> Kind {
    let scale = s1.max(s2);
    let precision = int1.max(int2).max(1) + scale as i16;
    if precision > 38 {
        Kind::Utf8
    } else {
        Kind::Decimal(precision as u8, scale)
    }
}

/// Adds the fields of `next` that `union` lacks, in their order; a field of
/// both keeps its place and takes the supertype of both. Every field is
/// nullable: a column dropped later is null in later files.
pub fn merge_fields(union: &mut Vec<Field>, next: &Fields) {
    for f in next.iter() {
        match union.iter_mut().find(|u| u.name() == f.name()) {
            Some(u) => *u = Field::new(f.name(), supertype(u.data_type(), f.data_type()), true),
            None => union.push(nullable(f)),
        }
    }
}

fn nullable(f: &Field) -> Field {
    let t = match f.data_type() {
        DataType::Struct(inner) => {
            DataType::Struct(inner.iter().map(|x| nullable(x)).collect::<Vec<_>>().into())
        }
        t => t.clone(),
    };
    Field::new(f.name(), t, true)
}

/// `column` in `to`, a supertype of its type: every value kept. An error
/// names a pair of types the lattice does not join this way (a defect).
pub fn convert(column: &ArrayRef, to: &DataType) -> Result<ArrayRef, String> {
    let from = column.data_type();
    if from == to {
        return Ok(column.clone());
    }
    let fail =
        |why: &dyn std::fmt::Display| format!("no exact conversion from {from} to {to}: {why}");
    if let (DataType::Struct(_), DataType::Struct(to_fields)) = (from, to) {
        let s = column
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| fail(&"not a struct array"))?;
        let mut fields = Vec::with_capacity(s.num_columns());
        let mut children = Vec::with_capacity(s.num_columns());
        for (f, c) in s.fields().iter().zip(s.columns()) {
            match to_fields.iter().find(|u| u.name() == f.name()) {
                Some(u) => {
                    children.push(convert(c, u.data_type())?);
                    fields.push(Field::new(f.name(), u.data_type().clone(), true));
                }
                None => {
                    children.push(c.clone());
                    fields.push(f.as_ref().clone());
                }
            }
        }
        let array = StructArray::try_new(fields.into(), children, s.nulls().cloned())
            .map_err(|e| fail(&e))?;
        return Ok(Arc::new(array));
    }
    let exact = CastOptions {
        safe: false,
        ..Default::default()
    };
    let cast = |to: &DataType| cast_with_options(column, to, &exact).map_err(|e| fail(&e));
    match (kind(from), kind(to)) {
        (_, Kind::Utf8) => match kind(from) {
            Kind::Utf8 => cast(to),
            Kind::Binary => Err(fail(&"bytes never become text")),
            _ => {
                let text = render(column).map_err(|e| fail(&e))?;
                cast_with_options(&text, to, &exact).map_err(|e| fail(&e))
            }
        },
        (_, Kind::Binary) => match kind(from) {
            Kind::Binary | Kind::Utf8 => cast(to),
            _ => {
                let text = render(column).map_err(|e| fail(&e))?;
                cast_with_options(&text, to, &exact).map_err(|e| fail(&e))
            }
        },
        (Kind::Int(_), Kind::Int(_))
        | (Kind::Int(_) | Kind::Decimal(..), Kind::Decimal(..))
        | (Kind::Int(_) | Kind::Decimal(..) | Kind::Float32, Kind::Float64) => {
            if supertype(from, to) != *to && !same(&supertype(from, to), to) {
                return Err(fail(&"not a supertype"));
            }
            cast(to)
        }
        _ if same(from, to) => cast(to),
        _ => Err(fail(&"not a supertype")),
    }
}

/// Every value of `column` as its text (nulls stay null): numbers in
/// decimal, dates and timestamps in ISO 8601, a list of strings (a SET) as
/// its elements joined by commas.
fn render(column: &ArrayRef) -> Result<ArrayRef, String> {
    match column.data_type() {
        DataType::List(_) => {
            return render_list::<i32>(column.as_any().downcast_ref().ok_or("not a list")?)
        }
        DataType::LargeList(_) => {
            return render_list::<i64>(column.as_any().downcast_ref().ok_or("not a list")?)
        }
        // Instants in UTC, as ISO 8601 with `Z` (the formatter would need
        // the time zone database to name "UTC").
        DataType::Timestamp(unit, Some(_)) => {
            let naive = with_type(column, DataType::Timestamp(*unit, None))?;
            let text = render(&naive)?;
            let text = text
                .as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .ok_or("rendered timestamps are not strings")?;
            let zoned: arrow::array::StringArray =
                text.iter().map(|v| v.map(|t| format!("{t}Z"))).collect();
            return Ok(Arc::new(zoned));
        }
        _ => {}
    }
    let options = FormatOptions::default().with_display_error(true);
    let formatter =
        ArrayFormatter::try_new(column.as_ref(), &options).map_err(|e| e.to_string())?;
    let mut out = StringBuilder::with_capacity(column.len(), column.len() * 8);
    for i in 0..column.len() {
        if column.is_null(i) {
            out.append_null();
        } else {
            out.append_value(formatter.value(i).to_string());
        }
    }
    Ok(Arc::new(out.finish()))
}

/// The same values under another type of the same layout.
fn with_type(column: &ArrayRef, to: DataType) -> Result<ArrayRef, String> {
    let data = column
        .to_data()
        .into_builder()
        .data_type(to)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(arrow::array::make_array(data))
}

fn render_list<O: OffsetSizeTrait>(list: &GenericListArray<O>) -> Result<ArrayRef, String> {
    let mut out = StringBuilder::with_capacity(list.len(), list.len() * 8);
    for i in 0..list.len() {
        if list.is_null(i) {
            out.append_null();
            continue;
        }
        let items = render(&list.value(i))?;
        let items = items
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .ok_or("rendered list items are not strings")?;
        let joined: Vec<&str> = items.iter().map(|v| v.unwrap_or("")).collect();
        out.append_value(joined.join(","));
    }
    Ok(Arc::new(out.finish()))
}

/// `column` (of a changelog supertype) in `to`, the type the source has now
/// (a current table's): text and bytes are parsed, a SET's text split at
/// its commas; a value that does not parse becomes null.
pub fn narrow(column: &ArrayRef, to: &DataType) -> Result<ArrayRef, String> {
    let lenient = CastOptions {
        safe: true,
        ..Default::default()
    };
    let mut column = column.clone();
    if kind(column.data_type()) == Kind::Binary && kind(to) != Kind::Binary {
        // Text as its UTF-8 bytes: other bytes are no text of a value.
        let mut text = StringBuilder::with_capacity(column.len(), 0);
        let bytes =
            cast_with_options(&column, &DataType::Binary, &lenient).map_err(|e| e.to_string())?;
        let bytes = bytes
            .as_any()
            .downcast_ref::<arrow::array::BinaryArray>()
            .ok_or("not bytes")?;
        for v in bytes.iter() {
            text.append_option(v.and_then(|b| std::str::from_utf8(b).ok()));
        }
        column = Arc::new(text.finish());
    }
    if let (Kind::Utf8, DataType::List(item)) = (kind(column.data_type()), to) {
        let text =
            cast_with_options(&column, &DataType::Utf8, &lenient).map_err(|e| e.to_string())?;
        let text = text
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .ok_or("not text")?;
        let mut list =
            arrow::array::ListBuilder::new(StringBuilder::new()).with_field(item.clone());
        for v in text.iter() {
            match v {
                None => list.append_null(),
                Some(s) => {
                    for part in s.split(',').filter(|p| !p.is_empty()) {
                        list.values().append_value(part);
                    }
                    list.append(true);
                }
            }
        }
        let list: ArrayRef = Arc::new(list.finish());
        return cast_with_options(&list, to, &lenient).map_err(|e| e.to_string());
    }
    if kind(to) == Kind::Binary && kind(column.data_type()) != Kind::Binary {
        let mut out = BinaryBuilder::new();
        let text = if kind(column.data_type()) == Kind::Utf8 {
            cast_with_options(&column, &DataType::Utf8, &lenient).map_err(|e| e.to_string())?
        } else {
            render(&column)?
        };
        let text = text
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .ok_or("not text")?;
        for v in text.iter() {
            out.append_option(v.map(str::as_bytes));
        }
        let bytes: ArrayRef = Arc::new(out.finish());
        return cast_with_options(&bytes, to, &lenient).map_err(|e| e.to_string());
    }
    if let (Kind::Utf8, DataType::Timestamp(unit, Some(_))) = (kind(column.data_type()), to) {
        // Text of an instant in UTC (`…Z`): parsed as one without a zone,
        // then marked UTC.
        let text =
            cast_with_options(&column, &DataType::Utf8, &lenient).map_err(|e| e.to_string())?;
        let text = text
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .ok_or("not text")?;
        let bare: arrow::array::StringArray = text
            .iter()
            .map(|v| v.map(|t| t.strip_suffix('Z').unwrap_or(t).to_string()))
            .collect();
        let naive = cast_with_options(&bare, &DataType::Timestamp(*unit, None), &lenient)
            .map_err(|e| e.to_string())?;
        return with_type(&naive, to.clone());
    }
    cast_with_options(&column, to, &lenient).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int16Array,
        Int64Array, ListBuilder, StringArray, TimestampMicrosecondArray,
    };
    use rand::{Rng, SeedableRng};

    /// Every lake type a column can have, with a column of seeded random
    /// values (edge values included) and nulls.
    fn samples(rng: &mut rand::rngs::StdRng) -> Vec<ArrayRef> {
        let n = 64;
        let ints: Vec<Option<i64>> = (0..n)
            .map(|i| match i {
                0 => Some(i64::MIN),
                1 => Some(i64::MAX),
                2 => None,
                _ => Some(rng.gen_range(-1_000_000_000_000i64..1_000_000_000_000)),
            })
            .collect();
        let dec = |p: u8, s: i8, rng: &mut rand::rngs::StdRng| -> ArrayRef {
            let max = 10i128.pow(p as u32) - 1;
            let v: Vec<Option<i128>> = (0..n)
                .map(|i| match i {
                    0 => Some(max),
                    1 => Some(-max),
                    2 => None,
                    _ => Some(rng.gen_range(-max..=max)),
                })
                .collect();
            Arc::new(
                Decimal128Array::from(v)
                    .with_precision_and_scale(p, s)
                    .unwrap(),
            )
        };
        let mut set = ListBuilder::new(StringBuilder::new());
        for i in 0..n {
            if i == 2 {
                set.append_null();
            } else {
                for j in 0..(i % 3) {
                    set.values().append_value(format!("v{j}"));
                }
                set.append(true);
            }
        }
        let utc: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(
                (0..n)
                    .map(|i| {
                        (i != 2).then(|| {
                            rng.gen_range(-62_000_000_000_000_000i64..250_000_000_000_000_000)
                        })
                    })
                    .collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        );
        vec![
            Arc::new(Int16Array::from(
                (0..n)
                    .map(|i| (i != 2).then(|| rng.gen::<i16>()))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(ints)),
            dec(20, 0, rng),
            dec(10, 2, rng),
            dec(38, 10, rng),
            dec(38, 0, rng),
            Arc::new(Float32Array::from(
                (0..n)
                    .map(|i| (i != 2).then(|| rng.gen::<f32>() * 1e6))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(
                (0..n)
                    .map(|i| (i != 2).then(|| rng.gen::<f64>() * 1e12))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                (0..n)
                    .map(|i| (i != 2).then(|| format!("s{i}é")))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(arrow::array::BinaryArray::from(
                (0..n)
                    .map(|i| (i != 2).then(|| vec![0u8, 255, i as u8]))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|v| v.as_deref())
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Date32Array::from(
                (0..n)
                    .map(|i| (i != 2).then(|| rng.gen_range(-719_162..2_932_896)))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(TimestampMicrosecondArray::from(
                (0..n)
                    .map(|i| {
                        (i != 2).then(|| {
                            rng.gen_range(-62_000_000_000_000_000i64..250_000_000_000_000_000)
                        })
                    })
                    .collect::<Vec<_>>(),
            )),
            utc,
            Arc::new(set.finish()),
            Arc::new(BooleanArray::from(
                (0..n)
                    .map(|i| (i != 2).then_some(i % 2 == 0))
                    .collect::<Vec<_>>(),
            )),
        ]
    }

    fn seed() -> u64 {
        let seed = std::env::var("SLUICE_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rand::random);
        eprintln!("seed {seed} (SLUICE_TEST_SEED)");
        seed
    }

    /// For every pair of lake types, both columns convert to the supertype
    /// without an error, keep their nulls, and keep their values: the
    /// supertype's value casts back to the original (text parses again,
    /// numbers widen exactly).
    #[test]
    fn every_pair_of_lake_types_converts_to_its_supertype_without_loss() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed());
        let columns = samples(&mut rng);
        for a in &columns {
            for b in &columns {
                let to = supertype(a.data_type(), b.data_type());
                assert_eq!(
                    to,
                    supertype(&to, b.data_type()),
                    "{} and {}: the supertype is no fixpoint",
                    a.data_type(),
                    b.data_type()
                );
                assert!(super::super::schema::delta_type(&to).is_some(), "{to}");
                for c in [a, b] {
                    let got = convert(c, &to).unwrap_or_else(|e| panic!("{e}"));
                    assert_eq!(got.data_type(), &to);
                    assert_eq!(got.len(), c.len());
                    assert_eq!(
                        got.logical_nulls(),
                        c.logical_nulls(),
                        "{} to {to}",
                        c.data_type()
                    );
                    // DOUBLE holds large integers and wide decimals rounded
                    // (the lattice says so): only their type is checked.
                    if to == DataType::Float64
                        && matches!(kind(c.data_type()), Kind::Int(_) | Kind::Decimal(..))
                    {
                        continue;
                    }
                    // Back to the original type: the same values.
                    let back = narrow(&got, c.data_type()).unwrap();
                    assert_eq!(
                        back.to_data(),
                        c.to_data(),
                        "{} through {to} and back",
                        c.data_type()
                    );
                }
            }
        }
    }

    #[test]
    fn the_lattice_joins_as_documented() {
        use DataType::*;
        let ts = Timestamp(arrow::datatypes::TimeUnit::Microsecond, None);
        assert_eq!(supertype(&Int64, &Int16), Int64);
        assert_eq!(supertype(&Int64, &Decimal128(20, 0)), Decimal128(20, 0));
        assert_eq!(
            supertype(&Decimal128(10, 2), &Decimal128(6, 4)),
            Decimal128(12, 4)
        );
        assert_eq!(supertype(&Int64, &Decimal128(38, 30)), Utf8);
        assert_eq!(supertype(&Decimal128(10, 2), &Float32), Float64);
        assert_eq!(supertype(&Float32, &Float32), Float32);
        assert_eq!(supertype(&Date32, &ts), Utf8);
        assert_eq!(supertype(&Date32, &Int64), Utf8);
        assert_eq!(supertype(&Binary, &Int64), Binary);
        assert_eq!(supertype(&Utf8, &Binary), Binary);
        assert_eq!(supertype(&Float64, &Utf8), Utf8);
        let dict = Dictionary(Box::new(Int32), Box::new(Utf8));
        assert_eq!(
            supertype(&Utf8, &dict),
            dict,
            "one Delta type: the newer kept"
        );
    }

    #[test]
    fn values_render_as_the_new_type_holds_them() {
        let date: ArrayRef = Arc::new(Date32Array::from(vec![Some(19_724), None]));
        let got = convert(&date, &DataType::Utf8).unwrap();
        let got = got.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(got.value(0), "2024-01-02");
        assert!(got.is_null(1));
        let dec: ArrayRef = Arc::new(
            Decimal128Array::from(vec![Some(-1250)])
                .with_precision_and_scale(10, 2)
                .unwrap(),
        );
        let got = convert(&dec, &DataType::Binary).unwrap();
        let got = got
            .as_any()
            .downcast_ref::<arrow::array::BinaryArray>()
            .unwrap();
        assert_eq!(got.value(0), b"-12.50");
        let mut set = ListBuilder::new(StringBuilder::new());
        set.values().append_value("a");
        set.values().append_value("b");
        set.append(true);
        set.append(true);
        let set: ArrayRef = Arc::new(set.finish());
        let got = convert(&set, &DataType::Utf8).unwrap();
        let got = got.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!((got.value(0), got.value(1)), ("a,b", ""));
        let back = narrow(
            &(Arc::new(StringArray::from(vec!["30", "x"])) as ArrayRef),
            &DataType::Int64,
        )
        .unwrap();
        let back = back.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(back.value(0), 30);
        assert!(back.is_null(1), "text that is no number of the new type");
    }
}
