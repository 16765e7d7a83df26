//! Vector fields: a `[float]` field marked `(vector: N, metric: "cosine")`
//! (or `"l2"`, `"dot"`) holds an embedding of exactly `N` finite floats, and
//! keel answers exact nearest-neighbour queries over it (keel-query's `vector`
//! module). This module holds the declaration ([`VectorSpec`], [`Metric`]) and
//! the distance functions every layer shares, so a query, a live result and a
//! reference implementation agree to the bit.
//!
//! The distance loops are plain safe Rust written so the compiler vectorises
//! them: 32 independent accumulators over `chunks_exact(32)`, summed pairwise
//! at the end (one accumulator would be a serial dependency chain the compiler
//! may not reorder, because float addition is not associative).

use std::fmt;

/// The most dimensions a vector field may declare.
pub const MAX_DIMENSIONS: u32 = 65_536;

/// How a vector field's distances are measured. Smaller is nearer for every
/// metric, so results are always ordered by ascending distance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// `1 - cos(a, b)`: 0 for the same direction, 2 for opposite ones. A zero
    /// vector has distance 1 to everything.
    Cosine,
    /// Euclidean distance `|a - b|`.
    L2,
    /// Negated dot product `-(a · b)`: the largest inner product is nearest.
    Dot,
}

impl Metric {
    /// The name used in a schema (`"cosine"`, `"l2"`, `"dot"`).
    pub fn name(self) -> &'static str {
        match self {
            Metric::Cosine => "cosine",
            Metric::L2 => "l2",
            Metric::Dot => "dot",
        }
    }

    /// The metric named `s` in a schema.
    ///
    /// ```
    /// use keel_schema::Metric;
    /// assert_eq!(Metric::parse("l2"), Some(Metric::L2));
    /// assert_eq!(Metric::parse("manhattan"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Metric> {
        match s {
            "cosine" => Some(Metric::Cosine),
            "l2" => Some(Metric::L2),
            "dot" => Some(Metric::Dot),
            _ => None,
        }
    }

    /// The distance between `query` and `v` (same length). For [`Metric::Cosine`]
    /// `query_norm` is `|query|` (computed once per query by [`norm`]); other
    /// metrics ignore it.
    ///
    /// ```
    /// use keel_schema::{vector::norm, Metric};
    /// let q = [1.0f32, 0.0];
    /// assert_eq!(Metric::Cosine.distance(&q, norm(&q), &[0.0, 2.0]), 1.0);
    /// assert_eq!(Metric::L2.distance(&q, 0.0, &[4.0, 4.0]), 5.0);
    /// assert_eq!(Metric::Dot.distance(&q, 0.0, &[3.0, 1.0]), -3.0);
    /// ```
    pub fn distance(self, query: &[f32], query_norm: f32, v: &[f32]) -> f32 {
        match self {
            Metric::L2 => l2_squared(query, v).sqrt(),
            Metric::Dot => -dot(query, v),
            Metric::Cosine => {
                let (d, vv) = dot_and_norm2(query, v);
                cosine(d, query_norm, vv)
            }
        }
    }

    /// [`Metric::distance`] with `|v|²` (`dot(v, v)`) known ahead, as for a
    /// vector held in memory: the same result to the bit, and for cosine one
    /// dot product instead of two sums.
    ///
    /// ```
    /// use keel_schema::{vector::{dot, norm}, Metric};
    /// let (q, v) = ([1.0f32, 2.0, 3.0], [0.5f32, -1.0, 4.0]);
    /// for m in [Metric::Cosine, Metric::L2, Metric::Dot] {
    ///     assert_eq!(m.distance(&q, norm(&q), &v), m.distance_known(&q, norm(&q), &v, dot(&v, &v)));
    /// }
    /// ```
    pub fn distance_known(self, query: &[f32], query_norm: f32, v: &[f32], v_norm2: f32) -> f32 {
        match self {
            Metric::Cosine => cosine(dot(query, v), query_norm, v_norm2),
            other => other.distance(query, query_norm, v),
        }
    }
}

/// `1 - a·b / (|a| |b|)`, or 1 when either is the zero vector.
fn cosine(d: f32, query_norm: f32, vv: f32) -> f32 {
    let den = query_norm * vv.sqrt();
    if den > 0.0 {
        1.0 - d / den
    } else {
        1.0
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A vector field's declaration: `(vector: dimensions, metric: "…")`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VectorSpec {
    /// How many floats every stored vector has (1 ..= [`MAX_DIMENSIONS`]).
    pub dimensions: u32,
    /// How distances are measured (`cosine` when the schema names none).
    pub metric: Metric,
}

/// Why a vector cannot be stored in or queried against a vector field.
#[derive(Debug, Clone, PartialEq)]
pub enum VectorProblem {
    /// It has another number of floats than the field declares.
    Dimensions {
        /// What the field declares.
        expected: u32,
        /// What was given.
        got: usize,
    },
    /// The float at `index` is NaN or infinite.
    NotFinite {
        /// Its position.
        index: usize,
        /// The value.
        value: f32,
    },
}

impl fmt::Display for VectorProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VectorProblem::Dimensions { expected, got } => {
                write!(f, "expected {expected} dimensions, got {got}")
            }
            VectorProblem::NotFinite { index, value } => {
                write!(
                    f,
                    "element {index} is {value}; every element must be finite"
                )
            }
        }
    }
}

impl VectorSpec {
    /// Check `v` against the declaration: the declared length, every float finite.
    ///
    /// ```
    /// use keel_schema::{Metric, VectorSpec, VectorProblem};
    /// let s = VectorSpec { dimensions: 2, metric: Metric::L2 };
    /// assert!(s.check(&[1.0, 2.0]).is_ok());
    /// assert_eq!(s.check(&[1.0]), Err(VectorProblem::Dimensions { expected: 2, got: 1 }));
    /// assert!(matches!(s.check(&[1.0, f32::NAN]), Err(VectorProblem::NotFinite { index: 1, .. })));
    /// ```
    pub fn check(&self, v: &[f32]) -> Result<(), VectorProblem> {
        if v.len() != self.dimensions as usize {
            return Err(VectorProblem::Dimensions {
                expected: self.dimensions,
                got: v.len(),
            });
        }
        match v.iter().position(|x| !x.is_finite()) {
            Some(index) => Err(VectorProblem::NotFinite {
                index,
                value: v[index],
            }),
            None => Ok(()),
        }
    }
}

/// Independent accumulators per loop: enough that the adds of one pass are not
/// a chain of dependent additions waiting on each other's latency (8 lanes kept
/// a 4-wide SIMD unit at one add per ~4 cycles; 32 keep it busy), and few
/// enough to stay in registers.
const LANES: usize = 32;

/// `a · b` over the common length.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = sum_lanes(&acc);
    for (x, y) in ar.iter().zip(br) {
        s += x * y;
    }
    s
}

/// `|a - b|²` over the common length.
pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for i in 0..LANES {
            let d = x[i] - y[i];
            acc[i] += d * d;
        }
    }
    let mut s = sum_lanes(&acc);
    for (x, y) in ar.iter().zip(br) {
        s += (x - y) * (x - y);
    }
    s
}

/// `(a · b, |b|²)`, the two sums of a cosine distance: exactly `dot(a, b)` and
/// `dot(b, b)`, so a distance from a remembered `|b|²`
/// ([`Metric::distance_known`]) equals one computed from scratch.
pub fn dot_and_norm2(a: &[f32], b: &[f32]) -> (f32, f32) {
    let n = a.len().min(b.len());
    (dot(a, b), dot(&b[..n], &b[..n]))
}

/// `|a|`.
pub fn norm(a: &[f32]) -> f32 {
    dot(a, a).sqrt()
}

/// The lanes summed pairwise (a fixed order: the same bits on every call).
fn sum_lanes(a: &[f32; LANES]) -> f32 {
    let mut v = *a;
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            v[i] += v[i + w];
        }
    }
    v[0]
}

/// `v` as packed little-endian f32 bytes: the stored column's layout.
pub fn pack(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Decode packed little-endian f32 bytes into `out` (cleared first). `None` if
/// the length is not a multiple of 4.
pub fn unpack_into(bytes: &[u8], out: &mut Vec<f32>) -> Option<()> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    out.clear();
    out.extend(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_loops_equal_the_plain_sums() {
        for n in [0usize, 1, 7, 8, 9, 17, 31, 32, 33, 100, 512] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let d: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (*x as f64) * (*y as f64))
                .sum();
            let l: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| ((*x - *y) as f64).powi(2))
                .sum();
            assert!((dot(&a, &b) as f64 - d).abs() < 1e-3);
            assert!((l2_squared(&a, &b) as f64 - l).abs() < 1e-3);
            let mut back = Vec::new();
            unpack_into(&pack(&a), &mut back).unwrap();
            assert_eq!(back, a);
        }
        assert!(unpack_into(&[1, 2, 3], &mut Vec::new()).is_none());
    }
}
