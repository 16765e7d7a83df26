//! The coarse pass of a nearest scan over an in-memory copy: every vector also
//! held as 8-bit codes, and a bound on how far a distance estimated from the
//! codes can be from the distance the exact scan computes from the floats.
//!
//! # Why
//!
//! The exact scan reads every byte of every vector: 16.7 MB for 8,155 512-d
//! photos. One core streams that at ~20 GB/s on the machines this project is
//! measured on, so the scan is bound by memory, not by arithmetic (a wider SIMD
//! unit barely moves it). The codes are a quarter of those bytes. A query reads
//! all the codes, and the floats of the few rows the codes cannot rule out. The
//! pass over the codes is then bound by instructions, so its inner loop is the
//! widest the CPU runs (`vector/kernel.rs`), the same exact integer sum on every
//! one.
//!
//! # How the answer stays exact
//!
//! For a stored vector `x` of `d` floats: scale `s = max|xⱼ| / 127`, codes
//! `cⱼ = round(xⱼ / s)` (stored as the byte `cⱼ + 128`), residual `e = x − s·c`; the copy keeps `s`,
//! `E = |e|` and `N = |x|`, each rounded up. For the query `q`: scale
//! `t = max|qⱼ| / P` with `P ≤ 32,767` small enough that no `i32` sum
//! overflows, codes `pⱼ = round(qⱼ / t)` (`i16`), residual `r = q − t·p`. Then
//!
//! ```text
//! q·x = t·s·(p·c) + t·(p·e) + r·x,   so   |q·x − t·s·(p·c)| ≤ t·|p|·E + |r|·N
//! ```
//!
//! by Cauchy–Schwarz, where `p·c` is an exact integer sum. Each metric is a
//! monotone function of `q·x` given `|q|` and `N`, so every row gets an interval
//! `[lo, hi]` of distances, widened by what the exact scan's own f32 arithmetic
//! may round (a relative `(d + 64)·2⁻²²`, several times the worst case of its
//! sums and divisions). The exact distance the scan would compute lies in it.
//!
//! Let `U` be the `k`-th smallest `hi` over the rows the filter keeps. `k` rows
//! have a distance of at most `U`, so the `k`-th best distance is at most `U`,
//! and every row of the exact top `k` has `lo ≤ U`. Those rows are the
//! candidates: they get their exact distance from the floats, and the best `k`
//! of them by `(distance, rowid)` are the best `k` of all rows, to the bit.
//!
//! A row the codes cannot bound — a component that is not finite, or a vector
//! so large (`max|xⱼ| > 10¹⁵`) or so small (`< 10⁻¹⁵`, not zero) that f32
//! arithmetic could overflow or underflow — is always a candidate. A query
//! outside those limits gets no coarse pass: every row is scored exactly.
//!
//! # What it costs
//!
//! Per vector, `d` bytes of codes and 16 bytes of bounds beside its `4·d` bytes
//! of floats. How many rows survive depends on the data: with k = 20 over 8,155
//! pseudo-random 512-d unit vectors (the bench's worst case: no clusters, so the
//! k-th distance sits in a crowd) a few dozen; real embeddings, where the
//! neighbours stand apart from the rest, fewer.

use std::collections::{BinaryHeap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use keel_schema::Metric;

use crate::vector::kernel::{dot_codes_kernel, DotCodes};
use crate::vector::scan_helper::ScanHelper;

/// Below this (and above zero) or above [`HUGE`], a vector's largest component
/// puts its f32 sums at risk of underflow or overflow: no bound is claimed.
const TINY: f32 = 1e-15;
/// See [`TINY`].
const HUGE: f32 = 1e15;
/// The largest stored code.
const CODE_MAX: f32 = 127.0;
/// Added to a code to store it as an unsigned byte: the loop then widens bytes
/// with zeros, one instruction fewer per eight than widening signed ones.
const BIAS: u8 = 128;

/// The codes and bounds of one copy's vectors, row `i` at `i × dimensions`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Codes {
    dimensions: usize,
    /// `cⱼ + 128`.
    codes: Vec<u8>,
    rows: Vec<RowBound>,
}

/// What bounds one row's estimate. `err` infinite: the row is not bounded.
#[derive(Debug, Clone, Copy)]
struct RowBound {
    /// `s`: the value of one code step.
    scale: f32,
    /// `|x − s·c|`, rounded up.
    err: f32,
    /// `|x|`, rounded up.
    norm: f32,
    /// `1 / norm` (0 for the zero vector): a cosine bound without a division.
    inv_norm: f32,
}

impl Codes {
    /// No rows yet, for vectors of `dimensions` floats.
    pub(crate) fn new(dimensions: usize) -> Codes {
        Codes {
            dimensions,
            ..Codes::default()
        }
    }

    /// Bytes the codes and bounds hold.
    pub(crate) fn bytes(&self) -> usize {
        self.codes.len() + self.rows.len() * std::mem::size_of::<RowBound>()
    }

    /// Bytes one more row adds.
    pub(crate) fn row_bytes(&self) -> usize {
        self.dimensions + std::mem::size_of::<RowBound>()
    }

    /// Code `x` (exactly `dimensions` floats) as the next row.
    pub(crate) fn push(&mut self, x: &[f32]) {
        debug_assert_eq!(x.len(), self.dimensions);
        let start = self.codes.len();
        self.codes.resize(start + x.len(), BIAS);
        let bound = code(x, &mut self.codes[start..]);
        self.rows.push(bound);
    }

    /// Code `x` as row `i`'s new vector.
    pub(crate) fn set(&mut self, i: usize, x: &[f32]) {
        debug_assert_eq!(x.len(), self.dimensions);
        let d = self.dimensions;
        self.rows[i] = code(x, &mut self.codes[i * d..(i + 1) * d]);
    }

    /// Code `x` as a new row before row `i` (`i` = the row count: the last).
    pub(crate) fn insert(&mut self, i: usize, x: &[f32]) {
        if i == self.rows.len() {
            return self.push(x);
        }
        let d = self.dimensions;
        self.codes
            .splice(i * d..i * d, std::iter::repeat_n(BIAS, d));
        let bound = code(x, &mut self.codes[i * d..(i + 1) * d]);
        self.rows.insert(i, bound);
    }

    /// Remove row `i`.
    pub(crate) fn remove(&mut self, i: usize) {
        let d = self.dimensions;
        self.codes.drain(i * d..(i + 1) * d);
        self.rows.remove(i);
    }

    /// The indices (ascending) of the rows that may be among the `k` nearest
    /// to `query` by `metric`, of those `keep` keeps; `None` when the query
    /// cannot be coded (every row must be scored).
    ///
    /// The rows are read in chunks of [`CHUNK_ROWS`]. An unfiltered pass over
    /// at least [`SPLIT_BYTES`] of codes asks `helper` (`vector/scan_helper.rs`), if
    /// idle, to take chunks too: the pass is bound by one core's instruction
    /// throughput, and a parked thread wakes in ~10 µs where a new one takes
    /// ~50. Each takes the next chunk when it is free, so neither waits for
    /// the other's share, and the caller redoes what a failed helper took.
    pub(crate) fn candidates(
        self: &Arc<Self>,
        query: &[f32],
        metric: Metric,
        k: usize,
        rowids: &[i64],
        keep: Option<&HashSet<i64>>,
        helper: Option<&ScanHelper>,
    ) -> Option<Vec<usize>> {
        if query.len() != self.dimensions {
            return None;
        }
        let q = Arc::new(QueryCode::new(query)?);
        if k == 0 {
            return Some(Vec::new());
        }
        let n = self.rows.len();
        let chunks = n.div_ceil(CHUNK_ROWS);
        // The chunks are handed out by this counter: whoever is free takes the
        // next, so neither thread waits on the other's share (the helper joins
        // once it has woken; the caller starts at once).
        let next = Arc::new(AtomicUsize::new(0));
        let shared = match helper {
            Some(h) if keep.is_none() && self.codes.len() >= SPLIT_BYTES => {
                let (codes, q, next) = (Arc::clone(self), Arc::clone(&q), Arc::clone(&next));
                h.try_run(move || codes.chunks(&q, metric, k, &next, &[], None))
            }
            _ => None,
        };
        let mut mine = self.chunks(&q, metric, k, &next, rowids, keep);
        let mut parts = vec![];
        if let Some(theirs) = shared {
            match theirs.recv() {
                Ok(theirs) => parts.push(theirs),
                // The helper failed: every chunk the caller did not do, here.
                Err(_) => {
                    let done: HashSet<usize> = mine.done.iter().copied().collect();
                    for c in (0..chunks).filter(|c| !done.contains(c)) {
                        self.pass_into(&mut mine, &q, metric, k, c, rowids, keep);
                    }
                }
            }
        }
        parts.push(mine);
        // The k smallest upper bounds of all rows are among the parts' own.
        let mut his: Vec<f64> = parts
            .iter()
            .flat_map(|p| p.his.iter().map(|b| b.0))
            .collect();
        let cut = if his.len() < k {
            f64::INFINITY
        } else {
            his.select_nth_unstable_by(k - 1, f64::total_cmp);
            his[k - 1]
        };
        let mut out: Vec<usize> = parts
            .iter_mut()
            .flat_map(|p| p.maybe.drain(..))
            .filter(|&(lo, _)| lo <= cut)
            .map(|(_, i)| i)
            .collect();
        out.sort_unstable();
        Some(out)
    }

    /// Take chunks from `next` until none is left; what their rows gave.
    fn chunks(
        &self,
        q: &QueryCode,
        metric: Metric,
        k: usize,
        next: &AtomicUsize,
        rowids: &[i64],
        keep: Option<&HashSet<i64>>,
    ) -> Pass {
        let mut pass = Pass {
            his: BinaryHeap::with_capacity(k + 1),
            maybe: Vec::new(),
            done: Vec::new(),
        };
        loop {
            let c = next.fetch_add(1, Ordering::Relaxed);
            if c * CHUNK_ROWS >= self.rows.len() {
                return pass;
            }
            #[cfg(test)]
            tests::maybe_fail_holding_a_chunk();
            self.pass_into(&mut pass, q, metric, k, c, rowids, keep);
        }
    }

    /// The coarse pass over chunk `c`'s rows, into `pass`: the `k` smallest
    /// upper bounds so far, and the rows whose lower bound did not exceed the
    /// `k`-th when they were read.
    #[allow(clippy::too_many_arguments)] // the query's parts, and where to put them
    fn pass_into(
        &self,
        pass: &mut Pass,
        q: &QueryCode,
        metric: Metric,
        k: usize,
        c: usize,
        rowids: &[i64],
        keep: Option<&HashSet<i64>>,
    ) {
        let d = self.dimensions;
        let rows = c * CHUNK_ROWS..((c + 1) * CHUNK_ROWS).min(self.rows.len());
        let his = &mut pass.his;
        let kernel = dot_codes_kernel();
        let codes = self.codes[rows.start * d..rows.end * d].chunks_exact(d);
        for ((i, codes), row) in rows.clone().zip(codes).zip(&self.rows[rows]) {
            if keep.is_some_and(|s| !s.contains(&rowids[i])) {
                continue;
            }
            let (lo, hi) = q.interval(metric, row, q.dot(kernel, codes));
            if his.len() < k {
                his.push(Bound(hi));
            } else if let Some(mut top) = his.peek_mut() {
                if Bound(hi) < *top {
                    *top = Bound(hi);
                }
            }
            // The cut-off only falls: a row above it now is above it at the end.
            if his.len() < k || his.peek().is_some_and(|u| lo <= u.0) {
                pass.maybe.push((lo, i));
            }
        }
        pass.done.push(c);
    }
}

/// Codes of `x` into `out` (as many bytes as `x` has floats), and the bound
/// of the row they make.
fn code(x: &[f32], out: &mut [u8]) -> RowBound {
    let finite = x.iter().all(|v| v.is_finite());
    let max = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if !finite || (max != 0.0 && !(TINY..=HUGE).contains(&max)) {
        out.fill(BIAS);
        return RowBound {
            scale: 0.0,
            err: f32::INFINITY,
            norm: 0.0,
            inv_norm: 0.0,
        };
    }
    if max == 0.0 {
        out.fill(BIAS);
        return RowBound {
            scale: 0.0,
            err: 0.0,
            norm: 0.0,
            inv_norm: 0.0,
        };
    }
    let scale = max / CODE_MAX;
    let inv = CODE_MAX / max;
    let (mut err2, mut norm2) = (0.0f64, 0.0f64);
    for (c, &v) in out.iter_mut().zip(x) {
        // Any code is sound (the residual below is what the bound uses);
        // the nearest one keeps it small. No `round()`: on baseline x86-64
        // that is a libm call per component.
        let r = v * inv;
        let code = ((r + 0.5f32.copysign(r)) as i32).clamp(-127, 127);
        *c = (code + i32::from(BIAS)) as u8;
        // Exact in f64: a 24-bit scale times a 7-bit code, minus an f32.
        let e = f64::from(v) - f64::from(scale) * f64::from(code);
        err2 += e * e;
        norm2 += f64::from(v) * f64::from(v);
    }
    let norm = round_up(norm2.sqrt());
    RowBound {
        scale,
        err: round_up(err2.sqrt()),
        norm,
        inv_norm: 1.0 / norm,
    }
}

/// Rows per chunk of the coarse pass: 128 KiB of 512-d codes, ~10 µs.
const CHUNK_ROWS: usize = 256;

/// Bytes of codes from which the helper thread is asked to share a pass: 1 MiB
/// takes ~80 µs on one core, against ~10 µs to wake the helper.
const SPLIT_BYTES: usize = 1 << 20;

/// What one thread's share of the coarse pass found.
struct Pass {
    /// The `k` smallest upper bounds of its rows (fewer if it kept fewer rows).
    his: BinaryHeap<Bound>,
    /// `(lower bound, row)` of the rows that may be candidates.
    maybe: Vec<(f64, usize)>,
    /// The chunks it did.
    done: Vec<usize>,
}

/// An f64 ordered by `total_cmp`, for the heap of upper bounds.
#[derive(Clone, Copy, PartialEq)]
struct Bound(f64);

impl Eq for Bound {}

impl Ord for Bound {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

impl PartialOrd for Bound {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// `v` as an f32 no smaller than `v`, with room for the f64 sums' own rounding.
fn round_up(v: f64) -> f32 {
    let v = v * (1.0 + 1e-9);
    let f = v as f32;
    if f64::from(f) < v {
        f.next_up()
    } else {
        f
    }
}

/// A query, coded: `t·p` plus a residual of length `residual`.
struct QueryCode {
    codes: Vec<i16>,
    /// `Σ pⱼ`: what the bias adds to a product, taken off again.
    code_sum: i64,
    /// `t`.
    scale: f64,
    /// `t·|p|`.
    coded_norm: f64,
    /// `|r|`.
    residual: f64,
    /// `|q|`.
    norm: f64,
    /// `1 / |q|`.
    inv_norm: f64,
    /// The relative rounding allowed to the exact scan's f32 arithmetic.
    slack: f64,
}

impl QueryCode {
    fn new(q: &[f32]) -> Option<QueryCode> {
        let d = q.len();
        let max = q.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        if d == 0 || !q.iter().all(|v| v.is_finite()) || !(TINY..=HUGE).contains(&max) {
            return None;
        }
        // |(cⱼ + 128)·pⱼ| ≤ 255·P, summed over d in an i32.
        let p_max = (i32::MAX as usize / (255 * d)).min(i16::MAX as usize);
        if p_max == 0 {
            return None;
        }
        let scale = f64::from(max) / p_max as f64;
        let inv_scale = p_max as f64 / f64::from(max);
        let (mut coded2, mut residual2, mut norm2) = (0.0f64, 0.0f64, 0.0f64);
        let mut code_sum = 0i64;
        let codes = q
            .iter()
            .map(|&v| {
                let v = f64::from(v);
                // Any code is sound (the residual is what the bound uses); no
                // `round()`: a libm call per component on baseline x86-64.
                let x = v * inv_scale;
                let p =
                    ((x + 0.5f64.copysign(x)) as i64).clamp(-(p_max as i64), p_max as i64) as f64;
                let r = v - scale * p;
                coded2 += p * p;
                residual2 += r * r;
                norm2 += v * v;
                code_sum += p as i64;
                p as i16
            })
            .collect();
        Some(QueryCode {
            codes,
            scale,
            code_sum,
            coded_norm: scale * coded2.sqrt(),
            residual: residual2.sqrt() * (1.0 + 1e-9) + f64::from(max) * 1e-12,
            norm: norm2.sqrt(),
            inv_norm: 1.0 / norm2.sqrt(),
            slack: (d as f64 + 64.0) * 2f64.powi(-22),
        })
    }

    /// `p · c` for a row's stored bytes (`c + 128`), by `kernel`
    /// (`vector/kernel.rs`): exact.
    fn dot(&self, kernel: DotCodes, stored: &[u8]) -> i64 {
        i64::from(kernel(stored, &self.codes)) - i64::from(BIAS) * self.code_sum
    }

    /// The distances the exact scan may compute for a row with these bounds
    /// and code product `dot`: `(lo, hi)`.
    fn interval(&self, metric: Metric, row: &RowBound, dot: i64) -> (f64, f64) {
        if row.err.is_infinite() {
            return (f64::NEG_INFINITY, f64::INFINITY);
        }
        let n = f64::from(row.norm);
        let est = self.scale * f64::from(row.scale) * dot as f64;
        let b = self.coded_norm * f64::from(row.err) + self.residual * n + 1e-9 * self.norm * n;
        let (t_lo, t_hi) = (est - b, est + b);
        let qn = self.norm * n;
        match metric {
            Metric::Dot => {
                let w = self.slack * qn + f64::from(f32::MIN_POSITIVE);
                (-t_hi - w, -t_lo + w)
            }
            // A zero vector's cosine distance is 1 (the scan's own rule).
            Metric::Cosine if row.norm == 0.0 => (1.0, 1.0),
            Metric::Cosine => {
                // The reciprocals' roundings (relative, < 1e-7) are in the 1e-6.
                let inv = self.inv_norm * f64::from(row.inv_norm);
                // max(|t_lo|, |t_hi|) is |est| + b.
                let w = 4.0 * self.slack + 1e-6 * (1.0 + (est.abs() + b) * inv);
                (1.0 - t_hi * inv - w, 1.0 - t_lo * inv + w)
            }
            Metric::L2 => {
                let base = self.norm * self.norm + n * n;
                let w = 1e-6 * base;
                let s_lo = (base - 2.0 * t_hi - w).max(0.0) * (1.0 - self.slack);
                let s_hi = (base - 2.0 * t_lo + w) * (1.0 + self.slack) + 1e-36;
                (
                    s_lo.sqrt() * (1.0 - self.slack),
                    s_hi.sqrt() * (1.0 + self.slack),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_schema::vector::{dot, norm};

    /// A small deterministic generator (xorshift), so the test needs no crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % 20_001) as f32 / 10_000.0 - 1.0
        }
    }

    /// Vectors that stress the bound: random, scaled far up and down, near
    /// the limits, one hot component, equal components, zero.
    fn stress(d: usize, rng: &mut Rng) -> Vec<Vec<f32>> {
        let mut out = Vec::new();
        for scale in [1.0f32, 1e-12, 1e12, 3e-15, 9e14, 1e-16, 2e15] {
            for _ in 0..6 {
                out.push((0..d).map(|_| rng.next() * scale).collect());
            }
        }
        let mut hot = vec![0.0f32; d];
        hot[d / 2] = 1.0;
        out.push(hot);
        out.push(vec![0.25; d]);
        out.push(vec![-0.25; d]);
        out.push(vec![0.0; d]);
        let mut inf = vec![0.5f32; d];
        inf[0] = f32::INFINITY;
        out.push(inf);
        out
    }

    /// The first row whose exact distance to one of `rows` (as the query) lies
    /// outside its interval, in any metric; `None` when every one is inside.
    /// Rows the codes cannot bound (an infinite component) hold anything.
    fn outside_interval(rows: &[Vec<f32>]) -> Option<String> {
        let d = rows[0].len();
        let mut codes = Codes::new(d);
        for x in rows {
            codes.push(x);
        }
        for q in rows {
            let Some(qc) = QueryCode::new(q) else {
                continue;
            };
            let qn = norm(q);
            for metric in [Metric::Cosine, Metric::L2, Metric::Dot] {
                for (i, x) in rows.iter().enumerate() {
                    let exact = f64::from(metric.distance_known(q, qn, x, dot(x, x)));
                    let c = &codes.codes[i * d..(i + 1) * d];
                    let (lo, hi) =
                        qc.interval(metric, &codes.rows[i], qc.dot(dot_codes_kernel(), c));
                    let unbounded = lo == f64::NEG_INFINITY && hi == f64::INFINITY;
                    let inside = lo <= exact && exact <= hi;
                    if !(unbounded || inside) {
                        return Some(format!(
                            "{metric} d={d} row {i}: {exact} outside [{lo}, {hi}]"
                        ));
                    }
                }
            }
        }
        None
    }

    #[test]
    fn every_exact_distance_lies_in_its_interval() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for d in [1usize, 3, 32, 77, 512] {
            if let Some(miss) = outside_interval(&stress(d, &mut rng)) {
                panic!("{miss}");
            }
        }
    }

    /// Set: the helper thread's next chunk panics after taking it.
    static HELPER_FAILS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    /// Chunks a failing helper took down with it.
    static LOST: AtomicUsize = AtomicUsize::new(0);

    pub(super) fn maybe_fail_holding_a_chunk() {
        let helper = std::thread::current().name() == Some("keel-scan");
        if helper && HELPER_FAILS.swap(false, Ordering::SeqCst) {
            LOST.fetch_add(1, Ordering::SeqCst);
            panic!("a helper that fails holding a chunk (test)");
        }
    }

    #[test]
    fn a_chunk_the_failing_helper_took_is_done_by_the_caller() {
        let mut rng = Rng(11);
        let (d, n) = (512, 4096);
        let rows: Vec<Vec<f32>> = (0..n)
            .map(|_| (0..d).map(|_| rng.next()).collect())
            .collect();
        let rowids: Vec<i64> = (1..=n as i64).collect();
        let mut codes = Codes::new(d);
        for x in &rows {
            codes.push(x);
        }
        let codes = Arc::new(codes);
        let helper = ScanHelper::default();
        let q = &rows[17];
        let want = codes
            .candidates(q, Metric::L2, 10, &rowids, None, None)
            .unwrap();
        // The helper may wake after the caller took every chunk; try until it
        // failed holding one.
        for _ in 0..200 {
            HELPER_FAILS.store(true, Ordering::SeqCst);
            let got = codes
                .candidates(q, Metric::L2, 10, &rowids, None, Some(&helper))
                .unwrap();
            assert_eq!(got, want);
            if LOST.load(Ordering::SeqCst) > 0 {
                HELPER_FAILS.store(false, Ordering::SeqCst);
                return;
            }
        }
        panic!("the helper never took a chunk");
    }

    #[test]
    fn the_candidates_hold_the_exact_top_k() {
        let mut rng = Rng(7);
        // Over SPLIT_BYTES of codes, so the helper shares the pass when given.
        let (d, n) = (512, 2100);
        // Many exact ties: few distinct directions, repeated.
        let base: Vec<Vec<f32>> = (0..12)
            .map(|_| (0..d).map(|_| rng.next()).collect())
            .collect();
        let rows: Vec<Vec<f32>> = (0..n / 2)
            .map(|i| base[i % 12].clone())
            .chain((n / 2..n).map(|_| (0..d).map(|_| rng.next()).collect()))
            .collect();
        let rowids: Vec<i64> = (1..=n as i64).collect();
        let mut codes = Codes::new(d);
        for x in &rows {
            codes.push(x);
        }
        assert!(codes.codes.len() >= SPLIT_BYTES);
        let codes = Arc::new(codes);
        let helper = ScanHelper::default();
        for metric in [Metric::Cosine, Metric::L2, Metric::Dot] {
            for (qi, k) in [(0usize, 1usize), (5, 20), (1500, 50), (2000, n / 2)] {
                let q = &rows[qi];
                let qn = norm(q);
                let score = |i: usize| {
                    (
                        metric.distance_known(q, qn, &rows[i], dot(&rows[i], &rows[i])),
                        rowids[i],
                    )
                };
                let mut all: Vec<(f32, i64)> = (0..n).map(score).collect();
                all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                for h in [None, Some(&helper)] {
                    let cands = codes
                        .candidates(q, metric, k, &rowids, None, h)
                        .expect("coded");
                    assert!(cands.windows(2).all(|w| w[0] < w[1]), "ascending");
                    let mut got: Vec<(f32, i64)> = cands.iter().map(|&i| score(i)).collect();
                    got.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    got.truncate(k);
                    assert_eq!(got, all[..k].to_vec(), "{metric} k={k}");
                    assert!(
                        cands.len() < n || k >= n / 2,
                        "{metric} k={k}: no row ruled out"
                    );
                }
            }
        }
        assert!(helper.started(), "the helper took half of some pass");
    }

    /// A vector of `d` components `m·10^e`, one exponent for the vector.
    fn scaled(d: usize) -> impl proptest::strategy::Strategy<Value = Vec<f32>> {
        use proptest::prelude::*;
        (-20i32..20, prop::collection::vec(-1.0f32..1.0, d))
            .prop_map(|(e, m)| m.into_iter().map(|x| x * 10f32.powi(e)).collect())
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        /// The interval holds the exact scan's distance for any finite vectors,
        /// whatever their scale (those the codes cannot bound say so).
        #[test]
        fn the_interval_holds_for_any_scale(
            rows in (1usize..70).prop_flat_map(|d| proptest::collection::vec(scaled(d), 2..24)),
        ) {
            let miss = outside_interval(&rows);
            proptest::prop_assert!(miss.is_none(), "{}", miss.unwrap_or_default());
        }
    }
}
