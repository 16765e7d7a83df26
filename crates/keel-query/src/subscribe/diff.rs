//! [`Diff`]: what changed between two results of the same query.

use std::sync::Arc;

use super::indices::Indices;
use crate::base::fx::FxMap;
use crate::query::fetch::StoredObject;

/// The row-level difference between an old and a new result of a query, in the
/// shape table and collection views consume (`UITableView.performBatchUpdates`,
/// `RecyclerView`'s `DiffUtil`, `NSFetchedResultsController`).
///
/// Objects are identified by their rowid. With `old` the previous result and `new`
/// the current one:
///
/// * `removed` — indices **in `old`** of objects that are not in `new`, ascending.
/// * `inserted` — indices **in `new`** of objects that were not in `old`, ascending.
/// * `moved` — `(index in old, index in new)` of objects in both results whose
///   order relative to the other kept objects changed, ascending by new index. It is
///   minimal: the objects in both results that are *not* listed keep their relative
///   order (they form a longest increasing subsequence), so an object that only
///   shifts because others were inserted or removed before it is not "moved".
/// * `updated` — indices **in `new`** of objects in both results whose bytes
///   changed, ascending (a moved object whose bytes changed is in both lists).
///
/// [`Diff::apply`] rebuilds `new` from `old`, taking from `new` only the objects at
/// `inserted` and `updated` indices.
///
/// ```
/// use keel_query::{Diff, StoredObject};
/// use std::sync::Arc;
/// let o = |rowid: i64, b: u8| Arc::new(StoredObject { rowid, bytes: vec![b] });
/// let old = vec![o(1, 0), o(2, 0), o(3, 0)];
/// let new = vec![o(3, 0), o(1, 9), o(4, 0)];
/// let d = Diff::between(&old, &new);
/// assert_eq!(d.removed, vec![1]);          // rowid 2 was at index 1
/// assert_eq!(d.inserted, vec![2]);         // rowid 4 is at index 2
/// assert_eq!(d.moved, vec![(2, 0)]);       // rowid 3 went to the front
/// assert_eq!(d.updated, vec![1]);          // rowid 1 has new bytes
/// assert_eq!(d.apply(&old, |i| new[i].clone()), new);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Indices in the old result of objects no longer in the result.
    pub removed: Indices,
    /// Indices in the new result of objects that were not in the old one.
    pub inserted: Indices,
    /// `(old index, new index)` of kept objects whose relative order changed.
    pub moved: Vec<(usize, usize)>,
    /// Indices in the new result of kept objects whose bytes changed.
    pub updated: Indices,
}

impl Diff {
    /// The diff of a first delivery: every object of `len` inserted.
    ///
    /// ```
    /// assert_eq!(keel_query::Diff::initial(2).inserted, vec![0, 1]);
    /// ```
    pub fn initial(len: usize) -> Diff {
        Diff {
            inserted: (0..len).collect(),
            ..Diff::default()
        }
    }

    /// True if nothing changed.
    ///
    /// ```
    /// assert!(keel_query::Diff::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty()
            && self.inserted.is_empty()
            && self.moved.is_empty()
            && self.updated.is_empty()
    }

    /// The diff from `old` to `new` (objects identified by rowid; "updated" compares
    /// bytes). Costs O(n log n) in the result sizes.
    pub fn between(old: &[Arc<StoredObject>], new: &[Arc<StoredObject>]) -> Diff {
        Diff::by(
            old,
            new,
            |o| o.rowid,
            |a, b| Arc::ptr_eq(a, b) || a.bytes == b.bytes,
        )
    }

    /// The diff from `old` to `new` with any identity and equality.
    ///
    /// ```
    /// let d = keel_query::Diff::by(&[1, 2, 3], &[3, 1, 2], |x| *x, |a, b| a == b);
    /// assert_eq!(d.moved, vec![(2, 0)]);
    /// ```
    pub fn by<T, K: std::hash::Hash + Eq>(
        old: &[T],
        new: &[T],
        id: impl Fn(&T) -> K,
        same: impl Fn(&T, &T) -> bool,
    ) -> Diff {
        let mut d = Diff::default();
        // The common prefix and suffix (same identities at the same places from
        // either end) are kept and never moved: a longest increasing subsequence of
        // the whole can always include them. Only the middle needs the index map,
        // so a window that gained or lost one object near an end costs O(n)
        // comparisons and no hashing.
        let n = old.len().min(new.len());
        let mut p = 0;
        while p < n && id(&old[p]) == id(&new[p]) {
            if !same(&old[p], &new[p]) {
                d.updated.push(p);
            }
            p += 1;
        }
        let mut s = 0;
        while s < n - p && id(&old[old.len() - 1 - s]) == id(&new[new.len() - 1 - s]) {
            s += 1;
        }
        let (om, nm) = (&old[p..old.len() - s], &new[p..new.len() - s]);
        let p0 = d.updated.len();
        let done =
            (om.is_empty() && nm.is_empty()) || Self::few_edits(&mut d, p, om, nm, &id, &same);
        if !done {
            d.inserted.clear();
            d.removed.clear();
            d.updated.truncate(p0);
            let mut pos: FxMap<K, usize> = FxMap::default();
            pos.reserve(om.len());
            pos.extend(om.iter().enumerate().map(|(i, o)| (id(o), i)));
            let mut kept_old = vec![false; om.len()];
            // (old index, new index) of kept objects, in new order.
            let mut kept: Vec<(usize, usize)> = Vec::with_capacity(nm.len().min(om.len()));
            for (j, o) in nm.iter().enumerate() {
                match pos.get(&id(o)) {
                    Some(&i) if !kept_old[i] => {
                        kept_old[i] = true;
                        kept.push((p + i, p + j));
                        if !same(&om[i], o) {
                            d.updated.push(p + j);
                        }
                    }
                    _ => d.inserted.push(p + j),
                }
            }
            d.removed = (0..om.len())
                .filter(|&i| !kept_old[i])
                .map(|i| p + i)
                .collect();
            if !kept.windows(2).all(|w| w[0].0 < w[1].0) {
                let stable = lis(&kept);
                d.moved = kept
                    .iter()
                    .zip(stable)
                    .filter(|(_, s)| !s)
                    .map(|(p, _)| *p)
                    .collect();
            }
        }
        let (ob, nb) = (old.len() - s, new.len() - s);
        for k in 0..s {
            if !same(&old[ob + k], &new[nb + k]) {
                d.updated.push(nb + k);
            }
        }
        d
    }

    /// [`Diff::by`] after setting aside the longest common prefix and suffix of
    /// `identical` pairs (same identity, same object: kept, not moved, not
    /// updated, whichever way the diff is made). Gives the same diff as
    /// [`Diff::by`]; `identical` is a cheap comparison (a window's (rowid, object
    /// address) pairs), so an edit in a large window costs a tight scan to the
    /// edit and [`Diff::by`] only on what lies between.
    pub(crate) fn by_trimmed<T, K: std::hash::Hash + Eq>(
        old: &[T],
        new: &[T],
        identical: impl Fn(&T, &T) -> bool,
        id: impl Fn(&T) -> K,
        same: impl Fn(&T, &T) -> bool,
    ) -> Diff {
        let p = old
            .iter()
            .zip(new)
            .take_while(|(a, b)| identical(a, b))
            .count();
        let (old_rest, new_rest) = (&old[p..], &new[p..]);
        let s = old_rest
            .iter()
            .rev()
            .zip(new_rest.iter().rev())
            .take_while(|(a, b)| identical(a, b))
            .count();
        let mut d = Diff::by(
            &old_rest[..old_rest.len() - s],
            &new_rest[..new_rest.len() - s],
            id,
            same,
        );
        if p > 0 {
            for i in d
                .removed
                .iter_mut()
                .chain(&mut d.inserted)
                .chain(&mut d.updated)
            {
                *i += p;
            }
            for (i, j) in &mut d.moved {
                *i += p;
                *j += p;
            }
        }
        d
    }

    /// The middle of a diff when it is a few insertions and removals and no move
    /// (the common case of a window after a small commit): one pass, and each
    /// unmatched object is looked up by a linear scan of the other side, with no
    /// map. Gives up (false) after `MAX_EDITS` unmatched objects or at a moved one;
    /// the caller then clears what was added and takes the general path. When it
    /// succeeds the kept objects are in order, so nothing moved, exactly what the
    /// general path finds.
    fn few_edits<T, K: Eq>(
        d: &mut Diff,
        p: usize,
        om: &[T],
        nm: &[T],
        id: &impl Fn(&T) -> K,
        same: &impl Fn(&T, &T) -> bool,
    ) -> bool {
        const MAX_EDITS: usize = 8;
        let (mut i, mut j, mut edits) = (0, 0, 0);
        while i < om.len() || j < nm.len() {
            if i < om.len() && j < nm.len() && id(&om[i]) == id(&nm[j]) {
                if !same(&om[i], &nm[j]) {
                    d.updated.push(p + j);
                }
                i += 1;
                j += 1;
                continue;
            }
            edits += 1;
            if edits > MAX_EDITS {
                return false;
            }
            // Objects before i / j are matched or known to be on one side only, so
            // an object absent from the rest of the other side is absent from it.
            if i < om.len() && !nm[j..].iter().any(|o| id(o) == id(&om[i])) {
                d.removed.push(p + i);
                i += 1;
            } else if j < nm.len() && !om[i..].iter().any(|o| id(o) == id(&nm[j])) {
                d.inserted.push(p + j);
                j += 1;
            } else {
                return false; // a moved object
            }
        }
        true
    }

    /// Rebuild the new result from `old`: objects at `inserted` and `updated`
    /// indices come from `fresh(new_index)`, every other one from `old`.
    ///
    /// ```
    /// let d = keel_query::Diff::by(&['a', 'b'], &['b', 'c'], |x| *x, |a, b| a == b);
    /// assert_eq!(d.apply(&['a', 'b'], |i| ['b', 'c'][i]), vec!['b', 'c']);
    /// ```
    pub fn apply<T: Clone>(&self, old: &[T], mut fresh: impl FnMut(usize) -> T) -> Vec<T> {
        match self.try_apply(old, |i| Ok::<T, std::convert::Infallible>(fresh(i))) {
            Ok(v) => v,
            Err(e) => match e {},
        }
    }

    /// [`Diff::apply`] on `v` itself, the result the diff was made against: `v`
    /// becomes the new result. What a list view does with each delivery, without
    /// copying the whole list: a diff without moves (every diff of a commit that
    /// changes one object) removes and inserts its few rows where they are, and the
    /// rows between keep their slots. A diff with moves, or one that does not fit
    /// `v`, rebuilds it as [`Diff::apply`] does.
    ///
    /// ```
    /// let (old, new) = (['a', 'b', 'c'], ['a', 'c', 'd']);
    /// let d = keel_query::Diff::by(&old, &new, |x| *x, |a, b| a == b);
    /// let mut shown = old.to_vec();
    /// d.apply_to(&mut shown, |i| new[i]);
    /// assert_eq!(shown, new);
    /// ```
    pub fn apply_to<T: Clone>(&self, v: &mut Vec<T>, mut fresh: impl FnMut(usize) -> T) {
        if !self.apply_in_place(v, &mut fresh) {
            *v = self.apply(v, fresh);
        }
    }

    /// [`Diff::apply_to`] for the hub, which builds a fresh list itself: false
    /// (and `v` untouched) when the diff needs a rebuild.
    pub(crate) fn apply_in_place<T>(
        &self,
        v: &mut Vec<T>,
        mut fresh: impl FnMut(usize) -> T,
    ) -> bool {
        let Some((removed, inserted, updated)) = self.in_place(v.len()) else {
            return false;
        };
        for &i in removed.iter().rev() {
            v.remove(i);
        }
        for &j in inserted {
            v.insert(j, fresh(j));
        }
        for &j in updated {
            v[j] = fresh(j);
        }
        true
    }

    /// The removed, inserted and updated positions, if the diff edits a list of
    /// `len` in place: no moves, `removed` and `inserted` strictly ascending (as
    /// every diff keel makes) and every index inside the list as it is at that step.
    #[inline]
    fn in_place(&self, len: usize) -> Option<(&[usize], &[usize], &[usize])> {
        let (removed, inserted, updated) = (&*self.removed, &*self.inserted, &*self.updated);
        let ascending = |x: &[usize]| x.windows(2).all(|w| w[0] < w[1]);
        if !self.moved.is_empty() || !ascending(removed) || !ascending(inserted) {
            return None;
        }
        if removed.last().is_some_and(|&i| i >= len) {
            return None;
        }
        // The k-th insertion lands in a list of `kept + k` rows. Ascending
        // insertions never lower `j - k`, so the last one decides.
        let kept = len - removed.len();
        if inserted
            .last()
            .is_some_and(|&j| j - (inserted.len() - 1) > kept)
        {
            return None;
        }
        let new_len = kept + inserted.len();
        updated
            .iter()
            .all(|&j| j < new_len)
            .then_some((removed, inserted, updated))
    }

    /// [`Diff::apply`] with a fallible `fresh` (e.g. decoding).
    pub fn try_apply<T: Clone, E>(
        &self,
        old: &[T],
        mut fresh: impl FnMut(usize) -> Result<T, E>,
    ) -> Result<Vec<T>, E> {
        let n = (old.len() + self.inserted.len()).saturating_sub(self.removed.len());
        let mut out: Vec<Option<T>> = vec![None; n];
        let mut gone = vec![false; old.len()];
        for &i in &self.removed {
            if let Some(g) = gone.get_mut(i) {
                *g = true;
            }
        }
        for &j in &self.inserted {
            if j < n {
                out[j] = Some(fresh(j)?);
            }
        }
        for &(i, j) in &self.moved {
            if let (Some(g), true) = (gone.get_mut(i), j < n) {
                *g = true;
                out[j] = Some(old[i].clone());
            }
        }
        let mut rest = old.iter().zip(&gone).filter(|(_, g)| !**g).map(|(o, _)| o);
        for slot in out.iter_mut().filter(|s| s.is_none()) {
            *slot = rest.next().cloned();
        }
        for &j in &self.updated {
            if j < n {
                out[j] = Some(fresh(j)?);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }
}

/// Marks a longest increasing subsequence (by old index) of `kept`.
fn lis(kept: &[(usize, usize)]) -> Vec<bool> {
    let n = kept.len();
    let mut stable = vec![false; n];
    if n == 0 {
        return stable;
    }
    // tails[k] = index into kept of the smallest tail of an increasing run of length k+1.
    let mut tails: Vec<usize> = Vec::new();
    let mut prev = vec![usize::MAX; n];
    for (x, &(i, _)) in kept.iter().enumerate() {
        let k = tails.partition_point(|&t| kept[t].0 < i);
        if k > 0 {
            prev[x] = tails[k - 1];
        }
        if k == tails.len() {
            tails.push(x);
        } else {
            tails[k] = x;
        }
    }
    let mut x = *tails.last().unwrap_or(&usize::MAX);
    while x != usize::MAX {
        stable[x] = true;
        x = prev[x];
    }
    stable
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(old: &[u32], new: &[u32]) -> Diff {
        let d = Diff::by(old, new, |x| x / 10, |a, b| a == b);
        assert_eq!(d.apply(old, |i| new[i]), new, "{old:?} -> {new:?}: {d:?}");
        // In place, where the diff has no moves, to the same result.
        let mut v = old.to_vec();
        let done = d.apply_in_place(&mut v, |i| new[i]);
        assert_eq!(done, d.moved.is_empty(), "{old:?} -> {new:?}: {d:?}");
        if done {
            assert_eq!(v, new, "in place: {old:?} -> {new:?}: {d:?}");
        } else {
            assert_eq!(v, old, "a diff that needs a rebuild leaves the list alone");
        }
        // The public form always gets there, in place or not.
        let mut v = old.to_vec();
        d.apply_to(&mut v, |i| new[i]);
        assert_eq!(v, new, "apply_to: {old:?} -> {new:?}: {d:?}");
        // Setting identical ends aside first changes nothing.
        let t = Diff::by_trimmed(old, new, |a, b| a == b, |x| x / 10, |a, b| a == b);
        assert_eq!(t, d, "trimmed: {old:?} -> {new:?}");
        d
    }

    #[test]
    fn a_diff_that_does_not_fit_the_list_is_not_applied_in_place() {
        let d = Diff {
            removed: [3].into(),
            ..Diff::default()
        };
        let mut v = vec![1, 2];
        assert!(!d.apply_in_place(&mut v, |_| 0));
        assert_eq!(v, [1, 2], "untouched");
        let d = Diff {
            inserted: [0, 5].into(),
            ..Diff::default()
        };
        assert!(!d.apply_in_place(&mut v, |_| 0));
        assert_eq!(v, [1, 2], "untouched");
        let d = Diff {
            updated: [2].into(),
            ..Diff::default()
        };
        assert!(!d.apply_in_place(&mut v, |_| 0));
        let d = Diff {
            removed: [0].into(),
            inserted: [1].into(),
            updated: [0].into(),
            ..Diff::default()
        };
        assert!(d.apply_in_place(&mut v, |j| 10 + j));
        assert_eq!(v, [10, 11]);
    }

    #[test]
    fn shapes() {
        assert!(check(&[10, 20], &[10, 20]).is_empty());
        assert_eq!(check(&[10, 20], &[10, 21]).updated, vec![1]);
        assert_eq!(check(&[], &[10]).inserted, vec![0]);
        assert_eq!(check(&[10], &[]).removed, vec![0]);
        let d = check(&[10, 20, 30, 40], &[20, 30, 40, 10]);
        assert_eq!(d.moved, vec![(0, 3)]);
        let d = check(&[10, 20, 30, 40], &[40, 10, 20, 30]);
        assert_eq!(d.moved, vec![(3, 0)]);
        let d = check(&[10, 20, 30], &[50, 31, 10]);
        assert_eq!(d.removed, vec![1]);
        assert_eq!(d.inserted, vec![0]);
        assert_eq!(d.updated, vec![1]);
        check(&[10, 20, 30, 40, 50], &[50, 40, 30, 20, 10]);
    }

    #[test]
    fn exhaustive_small() {
        // Every permutation-with-edits of up to 5 items round-trips through apply.
        let ids = [1u32, 2, 3, 4, 5];
        for mask_old in 0u32..32 {
            for mask_new in 0u32..32 {
                let old: Vec<u32> = ids
                    .iter()
                    .filter(|i| mask_old & (1 << (*i - 1)) != 0)
                    .map(|i| i * 10)
                    .collect();
                let mut new: Vec<u32> = ids
                    .iter()
                    .filter(|i| mask_new & (1 << (*i - 1)) != 0)
                    .map(|i| i * 10 + (i % 2))
                    .collect();
                check(&old, &new);
                new.reverse();
                check(&old, &new);
                let half = new.len() / 2;
                new.rotate_left(half);
                check(&old, &new);
            }
        }
    }

    #[test]
    fn trimmed_equals_by_after_random_edits() {
        // Windows of up to 40 rows; each case removes, inserts, updates and moves a
        // few, as commits do. Values are id * 10 + version.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n.max(1)
        };
        for _ in 0..5000 {
            let len = next(41) as usize;
            let old: Vec<u32> = (0..len as u32).map(|i| i * 10).collect();
            let mut new = old.clone();
            for _ in 0..next(5) {
                let at = next(new.len() as u64 + 1) as usize;
                match next(4) {
                    0 if !new.is_empty() => {
                        new.remove(at.min(new.len() - 1));
                    }
                    1 => new.insert(at, (100 + next(50) as u32) * 10),
                    2 if !new.is_empty() => {
                        let i = at.min(new.len() - 1);
                        new[i] += 1;
                    }
                    _ if new.len() > 1 => {
                        let i = at.min(new.len() - 1);
                        let x = new.remove(i);
                        let to = next(new.len() as u64 + 1) as usize;
                        new.insert(to, x);
                    }
                    _ => {}
                }
            }
            new.dedup_by_key(|x| *x / 10);
            let mut seen = std::collections::HashSet::new();
            new.retain(|x| seen.insert(*x / 10));
            check(&old, &new);
        }
    }
}
