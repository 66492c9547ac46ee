//! Where a current table file holds each key, in its own footer, for keys
//! of one integer column: the runs of consecutive keys (an auto-increment
//! table loaded by its snapshot is a handful of runs per file, one with a
//! few gaps a run per gap). A fold with deletion vectors finds the row of
//! each changed key there by a binary search over the runs, reading no
//! page of the file: what it costs follows the changes, not the table.
//!
//! The runs ride in the Parquet footer's key-value metadata under
//! [`RUNS_KEY`] (readers ignore keys they do not know), as `1,` and the
//! base64 of LEB128 varints: the first key (zigzag), then per run its
//! length and the gap to the next run's first key. A file whose keys make
//! too many runs (more than [`MAX_BYTES_PER_ROW`] of encoding a row, or any
//! key not an integer) has none, and a fold reads its key pages instead.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{
    Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use base64::Engine;

use super::*;

/// The footer key of a file's key runs.
pub(super) const RUNS_KEY: &str = "sluice.key_runs";

/// Encoded runs longer than this share of a byte per row of the file are
/// left out of its footer (4 bits a row).
const MAX_BYTES_PER_ROW: f64 = 0.5;

/// The runs of consecutive integer keys of a file, in row order.
#[derive(Debug, Default, PartialEq)]
pub(super) struct KeyRuns {
    /// Per run: its first key and the row that holds it.
    runs: Vec<(i128, u64)>,
    rows: u64,
    /// The keys seen were not all ascending integers.
    broken: bool,
}

/// The values of an integer column, widened.
pub(super) fn integers(a: &dyn Array) -> Option<Vec<i128>> {
    macro_rules! widen {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .values()
                .iter()
                .map(|v| *v as i128)
                .collect()
        };
    }
    if a.null_count() > 0 {
        return None;
    }
    Some(match a.data_type() {
        DataType::Int8 => widen!(Int8Type),
        DataType::Int16 => widen!(Int16Type),
        DataType::Int32 => widen!(Int32Type),
        DataType::Int64 => widen!(Int64Type),
        DataType::UInt8 => widen!(UInt8Type),
        DataType::UInt16 => widen!(UInt16Type),
        DataType::UInt32 => widen!(UInt32Type),
        DataType::UInt64 => widen!(UInt64Type),
        _ => return None,
    })
}

/// The one integer key column of a table keyed by `key_idx` of `schema`.
pub(super) fn runs_column(schema: &arrow::datatypes::Schema, key_idx: &[usize]) -> Option<usize> {
    match key_idx {
        [i] if schema.field(*i).data_type().is_integer() => Some(*i),
        _ => None,
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u128> {
    let mut v: u128 = 0;
    for shift in (0..128).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= ((b & 0x7f) as u128) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

impl KeyRuns {
    /// Takes the next keys of the file (a column of its rows in order).
    pub fn push(&mut self, keys: &dyn Array) {
        macro_rules! each {
            ($t:ty) => {
                for v in keys.as_primitive::<$t>().values() {
                    if !self.take(*v as i128) {
                        return;
                    }
                }
            };
        }
        if self.broken {
            return;
        }
        if keys.null_count() > 0 {
            self.broken = true;
            return;
        }
        match keys.data_type() {
            DataType::Int8 => each!(Int8Type),
            DataType::Int16 => each!(Int16Type),
            DataType::Int32 => each!(Int32Type),
            DataType::Int64 => each!(Int64Type),
            DataType::UInt8 => each!(UInt8Type),
            DataType::UInt16 => each!(UInt16Type),
            DataType::UInt32 => each!(UInt32Type),
            DataType::UInt64 => each!(UInt64Type),
            _ => self.broken = true,
        }
    }

    /// Takes the next key; false once the keys seen are not ascending.
    fn take(&mut self, k: i128) -> bool {
        match self.runs.last() {
            Some(&(start, row)) if k == start + (self.rows - row) as i128 => {}
            Some(&(start, row)) if k < start + (self.rows - row) as i128 => {
                self.broken = true;
                return false;
            }
            _ => self.runs.push((k, self.rows)),
        }
        self.rows += 1;
        true
    }

    /// The footer value of these runs, unless they are too many.
    pub fn encode(&self) -> Option<String> {
        if self.broken || self.runs.is_empty() {
            return None;
        }
        let mut out = Vec::new();
        let zigzag = |v: i128| ((v << 1) ^ (v >> 127)) as u128;
        put_varint(&mut out, zigzag(self.runs[0].0));
        for (i, &(start, row)) in self.runs.iter().enumerate() {
            let (next_start, next_row) = self.runs.get(i + 1).copied().unwrap_or((0, self.rows));
            let len = next_row - row;
            put_varint(&mut out, len as u128);
            if i + 1 < self.runs.len() {
                put_varint(&mut out, (next_start - (start + len as i128)) as u128);
            }
            if out.len() as f64 > 64.0 + self.rows as f64 * MAX_BYTES_PER_ROW {
                return None;
            }
        }
        let mut text = String::from("1,");
        base64::engine::general_purpose::STANDARD_NO_PAD.encode_string(&out, &mut text);
        Some(text)
    }

    /// The runs a footer value holds (None: not a value this reads).
    pub fn decode(text: &str) -> Option<KeyRuns> {
        let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(text.strip_prefix("1,")?)
            .ok()?;
        let mut at = 0;
        let z = get_varint(&bytes, &mut at)?;
        let mut start = ((z >> 1) as i128) ^ -((z & 1) as i128);
        let mut runs = KeyRuns::default();
        loop {
            let len = u64::try_from(get_varint(&bytes, &mut at)?).ok()?;
            runs.runs.push((start, runs.rows));
            runs.rows = runs.rows.checked_add(len)?;
            if at == bytes.len() {
                return Some(runs);
            }
            let gap = i128::try_from(get_varint(&bytes, &mut at)?).ok()?;
            start = start.checked_add(len as i128)?.checked_add(gap)?;
        }
    }

    /// The rows these runs cover.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The row that holds `key`, if a run has it.
    pub fn position(&self, key: i128) -> Option<u64> {
        let i = self.runs.partition_point(|(start, _)| *start <= key);
        let (start, row) = *self.runs.get(i.checked_sub(1)?)?;
        let end = self.runs.get(i).map_or(self.rows, |r| r.1);
        let pos = row.checked_add(u64::try_from(key - start).ok()?)?;
        (pos < end).then_some(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, UInt64Array};
    use rand::{Rng, SeedableRng};

    /// Seeded random ascending keys, dense with gaps of random lengths and
    /// at the ends of the integer range: the encoded runs come back equal,
    /// and every key (and every absent one) is found where it is.
    #[test]
    fn runs_round_trip_and_find_every_key() {
        for seed in 0..40u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut k: i128 = match seed % 4 {
                0 => i64::MIN as i128,
                1 => -(rng.gen_range(0..1_000_000) as i128),
                _ => rng.gen_range(0..1_000_000) as i128,
            };
            let gappy = rng.gen_range(0.0..0.2);
            let mut keys = Vec::new();
            for _ in 0..rng.gen_range(1..20_000) {
                keys.push(k);
                k += if rng.gen_bool(gappy) {
                    rng.gen_range(2..1000)
                } else {
                    1
                };
            }
            let mut runs = KeyRuns::default();
            for chunk in keys.chunks(rng.gen_range(1..5000)) {
                let a = Int64Array::from_iter_values(chunk.iter().map(|k| *k as i64));
                runs.push(&a);
            }
            assert_eq!(runs.rows(), keys.len() as u64);
            let Some(text) = runs.encode() else {
                // Only keys with many gaps may go without.
                assert!(
                    runs.runs.len() as f64 > keys.len() as f64 / 10.0,
                    "seed {seed}"
                );
                continue;
            };
            let back = KeyRuns::decode(&text).unwrap();
            assert_eq!(back, runs, "seed {seed}");
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(back.position(*k), Some(i as u64), "seed {seed}");
            }
            for _ in 0..2000 {
                let probe = rng.gen_range(keys[0] - 10..*keys.last().unwrap() + 10);
                let want = keys.binary_search(&probe).ok().map(|p| p as u64);
                assert_eq!(back.position(probe), want, "seed {seed}, key {probe}");
            }
        }
    }

    #[test]
    fn unsigned_keys_past_the_signed_range_and_broken_orders() {
        let mut runs = KeyRuns::default();
        runs.push(&UInt64Array::from(vec![
            u64::MAX - 2,
            u64::MAX - 1,
            u64::MAX,
        ]));
        let back = KeyRuns::decode(&runs.encode().unwrap()).unwrap();
        assert_eq!(back.position(u64::MAX as i128), Some(2));
        assert_eq!(back.position(u64::MAX as i128 - 3), None);

        let mut down = KeyRuns::default();
        down.push(&Int64Array::from(vec![5, 4]));
        assert_eq!(down.encode(), None);
        let mut nulls = KeyRuns::default();
        nulls.push(&Int64Array::from(vec![Some(1), None]));
        assert_eq!(nulls.encode(), None);
        let mut strings = KeyRuns::default();
        strings.push(&arrow::array::StringArray::from(vec!["a"]));
        assert_eq!(strings.encode(), None);
        assert_eq!(KeyRuns::decode("2,AA"), None);
        assert_eq!(KeyRuns::decode("1,!!"), None);
        assert_eq!(KeyRuns::decode("1,"), None);
    }
}
