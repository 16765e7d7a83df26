//! [`Indices`]: the positions a [`Diff`](super::Diff) lists, held inline when few.
//!
//! A commit that changes one object gives each query it reaches a diff of one or
//! two positions (the row that left, the row that came). As `Vec<usize>`s, each
//! such position list was a heap allocation made on the writer thread and freed by
//! the consumer: in the bench's app case (`docs/subscriptions.md`) about fifteen a
//! commit. Up to [`Indices::INLINE`] positions now live in the diff itself.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// Positions in a query result, ascending, as a [`Diff`](super::Diff) lists them.
/// It derefs to `[usize]` (`len`, `iter`, indexing, `contains`, `to_vec`), and
/// compares equal to a `Vec<usize>`, an array or a slice with the same positions.
///
/// Up to [`Indices::INLINE`] positions are held without a heap allocation.
///
/// ```
/// use keel_query::Indices;
/// let mut ix = Indices::default();
/// ix.push(3);
/// ix.push(7);
/// assert_eq!(ix, [3, 7]);
/// assert_eq!(ix, vec![3, 7]);
/// assert_eq!(ix.iter().sum::<usize>(), 10);
/// let many: Indices = (0..5).collect();
/// assert_eq!(many.len(), 5);
/// assert_eq!(many.into_iter().last(), Some(4));
/// ```
#[derive(Clone)]
pub struct Indices(Repr);

#[derive(Clone)]
enum Repr {
    /// `len` positions in `items[..len]`.
    Inline {
        len: u8,
        items: [usize; Indices::INLINE],
    },
    Heap(Vec<usize>),
}

impl Indices {
    /// How many positions are held without a heap allocation.
    pub const INLINE: usize = 2;

    /// Add a position at the end.
    pub fn push(&mut self, i: usize) {
        match &mut self.0 {
            Repr::Inline { len, items } if usize::from(*len) < Indices::INLINE => {
                items[usize::from(*len)] = i;
                *len += 1;
            }
            Repr::Inline { len, items } => {
                let mut v = Vec::with_capacity(Indices::INLINE * 2);
                v.extend_from_slice(&items[..usize::from(*len)]);
                v.push(i);
                self.0 = Repr::Heap(v);
            }
            Repr::Heap(v) => v.push(i),
        }
    }

    /// Remove every position (a heap list keeps its allocation).
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Keep the first `n` positions.
    pub fn truncate(&mut self, n: usize) {
        match &mut self.0 {
            Repr::Inline { len, .. } => *len = (*len).min(n.min(Indices::INLINE) as u8),
            Repr::Heap(v) => v.truncate(n),
        }
    }

    /// One position.
    pub(crate) fn one(i: usize) -> Indices {
        Indices(Repr::Inline {
            len: 1,
            items: [i, 0],
        })
    }
}

impl Default for Indices {
    fn default() -> Indices {
        Indices(Repr::Inline {
            len: 0,
            items: [0; Indices::INLINE],
        })
    }
}

impl Deref for Indices {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        match &self.0 {
            Repr::Inline { len, items } => &items[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }
}

/// Positions can be shifted in place (`iter_mut`); their number changes only
/// through [`Indices::push`], [`Indices::truncate`] and [`Indices::clear`].
impl DerefMut for Indices {
    fn deref_mut(&mut self) -> &mut [usize] {
        match &mut self.0 {
            Repr::Inline { len, items } => &mut items[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }
}

impl From<Vec<usize>> for Indices {
    fn from(v: Vec<usize>) -> Indices {
        Indices(Repr::Heap(v))
    }
}

impl<const N: usize> From<[usize; N]> for Indices {
    fn from(a: [usize; N]) -> Indices {
        a.into_iter().collect()
    }
}

impl From<Indices> for Vec<usize> {
    fn from(ix: Indices) -> Vec<usize> {
        match ix.0 {
            Repr::Heap(v) => v,
            Repr::Inline { .. } => ix.to_vec(),
        }
    }
}

impl FromIterator<usize> for Indices {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Indices {
        let mut ix = Indices::default();
        ix.extend(iter);
        ix
    }
}

impl Extend<usize> for Indices {
    fn extend<I: IntoIterator<Item = usize>>(&mut self, iter: I) {
        let iter = iter.into_iter();
        if iter.size_hint().0 > Indices::INLINE {
            if let Repr::Inline { len, items } = self.0 {
                let mut v = Vec::with_capacity(usize::from(len) + iter.size_hint().0);
                v.extend_from_slice(&items[..usize::from(len)]);
                self.0 = Repr::Heap(v);
            }
        }
        for i in iter {
            self.push(i);
        }
    }
}

impl<'a> IntoIterator for &'a Indices {
    type Item = &'a usize;
    type IntoIter = std::slice::Iter<'a, usize>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut Indices {
    type Item = &'a mut usize;
    type IntoIter = std::slice::IterMut<'a, usize>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl IntoIterator for Indices {
    type Item = usize;
    type IntoIter = IntoIter;
    fn into_iter(self) -> IntoIter {
        IntoIter { ix: self, next: 0 }
    }
}

/// The owning iterator of [`Indices`].
#[derive(Debug, Clone)]
pub struct IntoIter {
    ix: Indices,
    next: usize,
}

impl Iterator for IntoIter {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        let i = self.ix.get(self.next).copied()?;
        self.next += 1;
        Some(i)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.ix.len() - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for IntoIter {}

impl PartialEq for Indices {
    fn eq(&self, other: &Indices) -> bool {
        **self == **other
    }
}

impl Eq for Indices {}

impl std::hash::Hash for Indices {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (**self).hash(h);
    }
}

impl PartialEq<Vec<usize>> for Indices {
    fn eq(&self, other: &Vec<usize>) -> bool {
        **self == **other
    }
}

impl PartialEq<Indices> for Vec<usize> {
    fn eq(&self, other: &Indices) -> bool {
        **self == **other
    }
}

impl PartialEq<[usize]> for Indices {
    fn eq(&self, other: &[usize]) -> bool {
        **self == *other
    }
}

impl PartialEq<&[usize]> for Indices {
    fn eq(&self, other: &&[usize]) -> bool {
        **self == **other
    }
}

impl<const N: usize> PartialEq<[usize; N]> for Indices {
    fn eq(&self, other: &[usize; N]) -> bool {
        **self == *other
    }
}

impl fmt::Debug for Indices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_hold_the_same_positions_alike() {
        for n in 0..6 {
            let mut pushed = Indices::default();
            for i in 0..n {
                pushed.push(i * 3);
            }
            let want: Vec<usize> = (0..n).map(|i| i * 3).collect();
            let collected: Indices = want.iter().copied().collect();
            let from_vec = Indices::from(want.clone());
            assert_eq!(pushed, want);
            assert_eq!(pushed, collected, "inline or not, equal contents are equal");
            assert_eq!(pushed, from_vec);
            assert_eq!(Vec::from(pushed.clone()), want);
            assert_eq!(pushed.clone().into_iter().collect::<Vec<_>>(), want);
            assert_eq!(pushed.clone().into_iter().len(), n);
            assert_eq!(format!("{pushed:?}"), format!("{want:?}"));
        }
        assert_eq!(Indices::one(4), [4]);
        assert!(Indices::default().is_empty());
    }
}
