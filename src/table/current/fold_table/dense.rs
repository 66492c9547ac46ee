//! The first pass of a two-pass fold without sorting, for a table whose key
//! is one integer column and whose changed keys lie close together (an
//! auto-increment key: a bulk load and the updates and deletes that follow
//! it, or a burst of changes over a table of a few million rows). Each
//! key's last change is kept in an array indexed by the key, eight bytes a
//! key of the changed range, within the fold's memory share; read in key
//! order it gives what the sorter would, without sorting or spilling.
//!
//! Keys too far apart for the array (wider than the share holds, or more
//! than [`SPREAD`] times the changes read so far), a key that an update
//! moves, or a key column of another type leave it to the sorter
//! ([`super::changes::last_changes`]), which reads the changes again.

use roaring::RoaringTreemap;

use arrow::array::Array;

use super::changes::{
    read_ahead, seqs_and_ops, ChangeSource, InOrder, LastChanges, Op, Ordered, Removals, SeqsOps,
};
use super::*;

/// The changed range may span this many keys per change read (and
/// [`MIN_SLOTS`] at least) before the sorter takes over.
const SPREAD: usize = 16;
const MIN_SLOTS: usize = 1 << 16;
/// A slot: the change's `_seq` (less the fold's base) in the high half, its
/// position among the changes read in the low 31 bits, [`DELETES`] for a
/// delete; 0 for no change. Of two changes of a key the greater slot is the
/// later.
const DELETES: u64 = 1 << 31;
const POSITIONS: u64 = DELETES - 1;

/// Each key's last change, by key.
struct Slots {
    /// The key of `slots[0]`.
    base: i64,
    slots: Vec<u64>,
    /// `_seq` values are stored less this (so that they fit 32 bits).
    seq_base: Option<i64>,
    /// Slots at most (the fold's share, eight bytes each).
    cap: usize,
}

impl Slots {
    /// Records the change of `key` at `seq`, the `position`th read; false
    /// when the array cannot hold it.
    fn put(&mut self, key: i64, seq: i64, position: u64, deletes: bool, read: usize) -> bool {
        let seq_base = *self.seq_base.get_or_insert(seq - (1 << 31));
        let Some(seq) = seq
            .checked_sub(seq_base)
            .filter(|s| (1..=u32::MAX as i64).contains(s))
        else {
            return false;
        };
        if position > POSITIONS {
            return false;
        }
        let entry = ((seq as u64) << 32) | if deletes { DELETES } else { 0 } | position;
        let Some(at) = self.index(key, read) else {
            return false;
        };
        let slot = &mut self.slots[at];
        *slot = (*slot).max(entry);
        true
    }

    /// The slot of `key`, the array grown to hold it; `None` when it would
    /// pass the cap or spread too thin over `read` changes.
    fn index(&mut self, key: i64, read: usize) -> Option<usize> {
        if self.slots.is_empty() {
            self.base = key;
            self.slots.push(0);
            return Some(0);
        }
        let len = self.slots.len() as i128;
        let offset = key as i128 - self.base as i128;
        if (0..len).contains(&offset) {
            return Some(offset as usize);
        }
        let need = if offset < 0 { len - offset } else { offset + 1 };
        let most = (self.cap as i128).min((SPREAD * read).max(MIN_SLOTS) as i128);
        if need > most {
            return None;
        }
        // Doubled (within the cap) so that growth costs little per key.
        let new_len = need.max(len * 2).min(self.cap as i128);
        if offset < 0 {
            // Not below the least i64.
            let extra = (new_len - len).min(self.base as i128 - i64::MIN as i128) as usize;
            let mut grown = vec![0u64; self.slots.len() + extra];
            grown[extra..].copy_from_slice(&self.slots);
            self.slots = grown;
            self.base -= extra as i64;
            Some((key as i128 - self.base as i128) as usize)
        } else {
            self.slots.resize(new_len as usize, 0);
            Some(offset as usize)
        }
    }
}

/// What this pass needs of a changelog batch: the key (column `key_col`)
/// and the before image's key as columns, `_seq` and `_op`. Unlike
/// [`super::changes::change_rows`], no other column (the pass does not read
/// them; `change_rows` makes a null array for each) and no row format.
struct KeyChanges {
    keys: ArrayRef,
    /// The before image's key, when the batch has `_before` (null where a
    /// row has no before image).
    before: Option<ArrayRef>,
    cdc: SeqsOps,
}

/// [`KeyChanges`] of one changelog batch, whose columns are stored under
/// `sources`.
fn key_changes(
    t: &FoldTable,
    src: &ChangeSource,
    batch: &RecordBatch,
    sources: &[Option<String>],
    target: &Target<'_>,
    key_col: usize,
) -> Result<KeyChanges> {
    let keys = shape::project_one(batch, sources, &target.schema, key_col)?;
    let before = shape::project_before_one(batch, sources, &target.schema, key_col)?;
    Ok(KeyChanges {
        keys,
        before,
        cdc: seqs_and_ops(t, src, batch)?,
    })
}

/// The first pass ([`super::changes::last_changes`]) with [`Slots`];
/// `None` when they cannot hold the changes (the sorter's pass then reads
/// them).
pub(super) async fn last_changes(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    sources: &[ChangeSource],
    target: &Target<'_>,
    removals_matter: bool,
) -> Result<Option<LastChanges>> {
    let [key_col] = target.key_idx[..] else {
        return Ok(None);
    };
    let key_type = target.schema.field(key_col).data_type().clone();
    if !key_type.is_integer() {
        return Ok(None);
    }
    let mut slots = Slots {
        base: 0,
        slots: Vec::new(),
        seq_base: None,
        cap: ctx.budget / 8,
    };
    let mut selected = vec![RoaringTreemap::new(); sources.len()];
    // The position of each source's first row among the changes read.
    let mut starts = Vec::with_capacity(sources.len());
    let mut read = 0u64;
    let (mut changes, mut truncates) = (0usize, 0usize);
    let (names, mut batches) = read_ahead(ctx, t, sources, target, true, None);
    while let Some((i, batch)) = batches.next().await? {
        let src = &sources[i];
        while starts.len() <= i {
            starts.push(read);
        }
        let n = batch.num_rows();
        for (range, names) in src.ranges.iter().zip(&names[i]) {
            let rows = key_changes(t, src, &batch, names, target, key_col)?;
            let as_i64 = |a: &ArrayRef| cast(a, &DataType::Int64).ok();
            let Some(keys) = as_i64(&rows.keys) else {
                return Ok(None);
            };
            let keys = keys.as_primitive::<arrow::datatypes::Int64Type>();
            // The before image's key, and an update that moves its row to
            // another key (a key the cast to i64 nulls counts as moved).
            let cast_before = rows.before.as_ref().map(as_i64);
            let before = rows
                .before
                .as_ref()
                .zip(cast_before.as_ref())
                .map(|(b, c)| {
                    let c = c.as_ref();
                    (
                        b,
                        c.map(|c| c.as_primitive::<arrow::datatypes::Int64Type>()),
                    )
                });
            let moved = |r: usize| match before {
                Some((b, c)) if b.is_valid(r) => {
                    c.is_none_or(|c| c.is_null(r) || c.value(r) != keys.value(r))
                }
                _ => false,
            };
            for r in 0..n {
                let s = rows.cdc.seq(r);
                if s < range.lo || s >= range.hi {
                    continue;
                }
                let position = read + r as u64;
                match rows.cdc.op(r) {
                    Op::Truncate => {
                        truncates += 1;
                        selected[i].insert(position - starts[i]);
                    }
                    op => {
                        if keys.is_null(r) || moved(r) {
                            return Ok(None);
                        }
                        changes += 1;
                        let deletes = op == Op::Delete;
                        if !slots.put(keys.value(r), s, position, deletes, changes) {
                            return Ok(None);
                        }
                    }
                }
            }
        }
        read += n as u64;
    }
    while starts.len() < sources.len() {
        starts.push(read);
    }

    // In key order: what the sorter's merge gives.
    let whole = sources.iter().all(ChangeSource::whole);
    let mut ascending = whole && truncates == 0;
    let mut previous: Option<u64> = None;
    let mut puts = vec![RoaringTreemap::new(); sources.len()];
    let mut removed: Vec<(i64, i64)> = Vec::new();
    let mut removed_bytes = 0usize;
    for (at, &slot) in slots.slots.iter().enumerate() {
        if slot == 0 {
            continue;
        }
        let position = slot & POSITIONS;
        let source = starts.partition_point(|s| *s <= position) - 1;
        let row = position - starts[source];
        selected[source].insert(row);
        if !ascending {
            continue;
        }
        if slot & DELETES != 0 {
            if removals_matter {
                let seq = slots.seq_base.unwrap_or(0) + (slot >> 32) as i64;
                removed.push((slots.base + at as i64, seq));
                // As [`Removals::push`] counts a key in the row format.
                removed_bytes += 12 + 1 + key_type.primitive_width().unwrap_or(8);
                ascending = removed_bytes <= ctx.budget / 4;
            }
        } else {
            ascending = previous.is_none_or(|p| p < position);
            previous = Some(position);
            puts[source].insert(row);
        }
    }
    drop(slots);
    let in_order = match ascending {
        true => {
            let mut removals = Removals::default();
            let keys = arrow::array::Int64Array::from_iter_values(removed.iter().map(|r| r.0));
            let keys = cast(&keys, &key_type).map_err(|e| lake_err(t, e))?;
            let keys = target
                .conv
                .convert_columns(&[keys])
                .map_err(|e| lake_err(t, e))?;
            for (r, (_, seq)) in removed.iter().enumerate() {
                removals.push(keys.row(r).as_ref(), *seq, usize::MAX);
            }
            Some(Ordered {
                found: InOrder {
                    changes: changes + truncates,
                    // No fold copies the chunks of rows picked from among others.
                    puts_only: false,
                    first: None,
                },
                puts,
                removals,
            })
        }
        false => None,
    };
    Ok(Some(LastChanges {
        selected,
        changes: changes + truncates,
        in_order,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(cap: usize) -> Slots {
        Slots {
            base: 0,
            slots: Vec::new(),
            seq_base: None,
            cap,
        }
    }

    /// Each key's last change, from the slots, as (key, position, deletes).
    fn last(s: &Slots) -> Vec<(i64, u64, bool)> {
        s.slots
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 0)
            .map(|(i, v)| (s.base + i as i64, v & POSITIONS, v & DELETES != 0))
            .collect()
    }

    #[test]
    fn slots_keep_each_keys_change_of_the_highest_seq() {
        // Seeded changes over keys that grow both ways, in seq order
        // shuffled (files of one checkpoint interleave in _seq): compared
        // with a map of each key's change of the highest seq.
        let mut state = 0x5eed_u64;
        let mut rng = |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        for round in 0..50 {
            let mut s = slots(1 << 20);
            let mut want = std::collections::BTreeMap::new();
            let centre = rng(1 << 40) as i64 - (1 << 39);
            let changes = 1 + rng(3000) as usize;
            let mut seqs: Vec<i64> = (0..changes as i64).map(|i| 1_000_000 + 3 * i).collect();
            for i in (1..seqs.len()).rev() {
                if rng(4) == 0 {
                    seqs.swap(i, rng(i as u64 + 1) as usize);
                }
            }
            for (position, seq) in seqs.into_iter().enumerate() {
                let key = centre + rng(2000) as i64 - 1000;
                let deletes = rng(3) == 0;
                assert!(s.put(key, seq, position as u64, deletes, position + 1));
                let e = want.entry(key).or_insert((seq, position as u64, deletes));
                if seq > e.0 {
                    *e = (seq, position as u64, deletes);
                }
            }
            let want: Vec<(i64, u64, bool)> =
                want.into_iter().map(|(k, (_, p, d))| (k, p, d)).collect();
            assert_eq!(last(&s), want, "round {round}");
        }
    }

    #[test]
    fn slots_refuse_what_they_cannot_hold() {
        // Past the cap, below the keys or above them.
        let mut s = slots(100);
        assert!(s.put(1_000, 10, 0, false, 1));
        assert!(s.put(1_099, 11, 1, false, 2));
        assert!(!s.put(1_100, 12, 2, false, 3));
        assert!(s.put(1_000, 13, 3, true, 4));
        let mut s = slots(100);
        assert!(s.put(1_000, 10, 0, false, 1));
        assert!(s.put(901, 11, 1, false, 2));
        assert!(!s.put(900, 12, 2, false, 3));
        assert_eq!(last(&s).first(), Some(&(901, 1, false)));
        // Spread too thin: a range of more than SPREAD keys a change (past
        // MIN_SLOTS).
        let mut s = slots(1 << 30);
        assert!(s.put(0, 10, 0, false, 1));
        assert!(s.put(MIN_SLOTS as i64 - 1, 11, 1, false, 2));
        assert!(!s.put(MIN_SLOTS as i64 * 4, 12, 2, false, 3));
        // Keys at the ends of i64, far apart: refused, no overflow.
        let mut s = slots(1 << 20);
        assert!(s.put(i64::MIN + 3, 10, 0, false, 1));
        assert!(s.put(i64::MIN + 4, 11, 1, false, 2));
        assert!(s.put(i64::MIN, 12, 2, true, 3));
        assert_eq!(
            last(&s),
            vec![
                (i64::MIN, 2, true),
                (i64::MIN + 3, 0, false),
                (i64::MIN + 4, 1, false)
            ]
        );
        let mut s = slots(1 << 20);
        assert!(s.put(i64::MAX, 10, 0, false, 1));
        assert!(!s.put(i64::MIN, 11, 1, false, 2));
        assert!(s.put(i64::MAX - 5, 12, 2, false, 3));
        assert_eq!(
            last(&s),
            vec![(i64::MAX - 5, 2, false), (i64::MAX, 0, false)]
        );
        // Seqs more than 2^31 below the first, or positions past 31 bits.
        let mut s = slots(1 << 20);
        assert!(s.put(5, 1 << 40, 0, false, 1));
        assert!(!s.put(6, (1 << 40) - (1 << 31), 1, false, 2));
        assert!(!s.put(6, (1 << 40) + 1, DELETES, false, 2));
    }
}
