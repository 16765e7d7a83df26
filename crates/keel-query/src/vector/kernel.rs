//! The inner loop of the coarse pass, `Σ cⱼ·pⱼ` of a row's stored bytes
//! (`vector/codes.rs`: 8-bit codes + 128) and the query's 16-bit codes, picked
//! for the CPU at run time.
//!
//! # Why a kernel of its own
//!
//! The build targets baseline x86-64, so the compiler's own vectorisation of
//! the loop stops at SSE2: 8 products per `pmaddwd`. The coarse pass reads
//! every row's codes for every query and is bound by that instruction
//! throughput, so this module asks the CPU once per process what it has and
//! hands out the widest loop it can run: AVX-512BW (32 products per
//! instruction), else AVX2 (16), else the portable loop; NEON on aarch64.
//!
//! # Why the result is the same on every CPU
//!
//! Every kernel computes the same integer sum exactly: each product of a
//! byte (0..=255) and an `i16` fits an `i32`, pairs of them too, and
//! `QueryCode::new` picks the query's codes so that the whole sum over the
//! row fits an `i32` — so every partial sum, in any order, fits as well.
//! No rounding happens anywhere, so there is no tolerance: the kernels agree
//! to the bit (the tests compare every kernel this machine runs with the
//! portable one), and the bounds the coarse pass derives from the sum are
//! the ones `vector/codes.rs` proves.
//!
//! # Why this module may use `unsafe`
//!
//! The crate denies `unsafe`; this module alone allows it (see `vector/mod.rs`),
//! for two things only: calling a function compiled for a CPU feature, which
//! is sound once the feature was detected at run time, and the unaligned
//! loads of the SIMD registers, each within the slices' bounds.

use std::sync::OnceLock;

/// A kernel: `Σ c[j]·p[j]` over the shorter of the two slices.
pub(crate) type DotCodes = fn(&[u8], &[i16]) -> i32;

/// The fastest kernel this CPU runs, detected once per process.
pub(crate) fn dot_codes_kernel() -> DotCodes {
    static BEST: OnceLock<DotCodes> = OnceLock::new();
    *BEST.get_or_init(|| available().last().map_or(portable as DotCodes, |k| k.1))
}

/// Every kernel this CPU can run, by name, slowest (the portable loop) first.
pub(crate) fn available() -> Vec<(&'static str, DotCodes)> {
    #[allow(unused_mut)] // without a SIMD arm on this target, only the portable loop
    let mut out: Vec<(&'static str, DotCodes)> = vec![("portable", portable)];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            out.push(("avx2", x86::avx2));
        }
        if std::arch::is_x86_feature_detected!("avx512bw") {
            out.push(("avx512bw", x86::avx512bw));
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            out.push(("neon", arm::neon));
        }
    }
    out
}

/// The portable loop, written like the float loops of [`keel_schema::vector`]
/// so the compiler vectorises it for the baseline target (`pmaddwd` on x86).
pub(crate) fn portable(c: &[u8], p: &[i16]) -> i32 {
    const LANES: usize = 32;
    let n = c.len().min(p.len());
    let whole = n - n % LANES;
    let mut acc = [0i32; LANES];
    for (x, y) in c[..whole]
        .chunks_exact(LANES)
        .zip(p[..whole].chunks_exact(LANES))
    {
        for i in 0..LANES {
            acc[i] += i32::from(x[i]) * i32::from(y[i]);
        }
    }
    acc.iter().sum::<i32>() + tail(&c[whole..n], &p[whole..n])
}

/// The products past the last whole SIMD step.
fn tail(c: &[u8], p: &[i16]) -> i32 {
    c.iter()
        .zip(p)
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::tail;

    /// AVX2: 16 bytes widened to 16 `i16`, multiplied and summed in pairs.
    pub(super) fn avx2(c: &[u8], p: &[i16]) -> i32 {
        // SAFETY: `available` hands this kernel out only after
        // `is_x86_feature_detected!("avx2")` said the CPU has AVX2.
        unsafe { avx2_on(c, p) }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn avx2_on(c: &[u8], p: &[i16]) -> i32 {
        const STEP: usize = 16;
        let n = c.len().min(p.len());
        let whole = n - n % STEP;
        let mut acc = _mm256_setzero_si256();
        let mut i = 0;
        while i < whole {
            // SAFETY: `i + 16 ≤ n`, no longer than either slice: the 16 bytes
            // and the 16 `i16` read lie inside them; `loadu` needs no alignment.
            let (x, y) = unsafe {
                (
                    _mm_loadu_si128(c.as_ptr().add(i).cast()),
                    _mm256_loadu_si256(p.as_ptr().add(i).cast()),
                )
            };
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_cvtepu8_epi16(x), y));
            i += STEP;
        }
        let lanes = _mm_add_epi32(
            _mm256_castsi256_si128(acc),
            _mm256_extracti128_si256::<1>(acc),
        );
        let mut out = [0i32; 4];
        // SAFETY: `out` is 16 writable bytes; `storeu` needs no alignment.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), lanes) };
        out.iter().sum::<i32>() + tail(&c[whole..n], &p[whole..n])
    }

    /// AVX-512BW: 32 bytes widened to 32 `i16` per step, two steps in flight.
    pub(super) fn avx512bw(c: &[u8], p: &[i16]) -> i32 {
        // SAFETY: `available` hands this kernel out only after
        // `is_x86_feature_detected!("avx512bw")` said the CPU has AVX-512BW
        // (which implies AVX-512F).
        unsafe { avx512bw_on(c, p) }
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn avx512bw_on(c: &[u8], p: &[i16]) -> i32 {
        const STEP: usize = 32;
        let n = c.len().min(p.len());
        let whole = n - n % STEP;
        let (mut a0, mut a1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let mut i = 0;
        while i + 2 * STEP <= whole {
            // SAFETY: `i + 64 ≤ n`, no longer than either slice: the 64 bytes
            // and the 64 `i16` read lie inside them; `loadu` needs no alignment.
            let (x0, y0, x1, y1) = unsafe {
                (
                    _mm256_loadu_si256(c.as_ptr().add(i).cast()),
                    _mm512_loadu_si512(p.as_ptr().add(i).cast()),
                    _mm256_loadu_si256(c.as_ptr().add(i + STEP).cast()),
                    _mm512_loadu_si512(p.as_ptr().add(i + STEP).cast()),
                )
            };
            a0 = _mm512_add_epi32(a0, _mm512_madd_epi16(_mm512_cvtepu8_epi16(x0), y0));
            a1 = _mm512_add_epi32(a1, _mm512_madd_epi16(_mm512_cvtepu8_epi16(x1), y1));
            i += 2 * STEP;
        }
        if i < whole {
            // SAFETY: `i + 32 ≤ whole ≤ n`: in bounds of both slices, as above.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_si256(c.as_ptr().add(i).cast()),
                    _mm512_loadu_si512(p.as_ptr().add(i).cast()),
                )
            };
            a0 = _mm512_add_epi32(a0, _mm512_madd_epi16(_mm512_cvtepu8_epi16(x), y));
        }
        _mm512_reduce_add_epi32(_mm512_add_epi32(a0, a1)) + tail(&c[whole..n], &p[whole..n])
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::*;

    use super::tail;

    /// NEON: 16 bytes widened to two halves of 8 `i16`, multiplied into
    /// `i32` lanes with `smlal`.
    pub(super) fn neon(c: &[u8], p: &[i16]) -> i32 {
        // SAFETY: `available` hands this kernel out only after
        // `is_aarch64_feature_detected!("neon")` said the CPU has NEON.
        unsafe { neon_on(c, p) }
    }

    #[target_feature(enable = "neon")]
    unsafe fn neon_on(c: &[u8], p: &[i16]) -> i32 {
        const STEP: usize = 16;
        let n = c.len().min(p.len());
        let whole = n - n % STEP;
        let (mut a0, mut a1) = (vdupq_n_s32(0), vdupq_n_s32(0));
        let mut i = 0;
        while i < whole {
            // SAFETY: `i + 16 ≤ n`, no longer than either slice: the 16 bytes
            // and the 16 `i16` (two loads of 8) read lie inside them.
            let (x, y0, y1) = unsafe {
                (
                    vld1q_u8(c.as_ptr().add(i)),
                    vld1q_s16(p.as_ptr().add(i)),
                    vld1q_s16(p.as_ptr().add(i + 8)),
                )
            };
            let lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(x)));
            let hi = vreinterpretq_s16_u16(vmovl_high_u8(x));
            a0 = vmlal_s16(a0, vget_low_s16(lo), vget_low_s16(y0));
            a0 = vmlal_high_s16(a0, lo, y0);
            a1 = vmlal_s16(a1, vget_low_s16(hi), vget_low_s16(y1));
            a1 = vmlal_high_s16(a1, hi, y1);
            i += STEP;
        }
        vaddvq_s32(vaddq_s32(a0, a1)) + tail(&c[whole..n], &p[whole..n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Codes and query codes of `d` components at the extremes the coarse
    /// pass allows: bytes 0..=255, query codes up to `±P` with
    /// `d·255·P ≤ i32::MAX` (what `QueryCode::new` keeps).
    fn case(d: usize, rng: &mut Rng, extreme: bool) -> (Vec<u8>, Vec<i16>) {
        let p_max = (i32::MAX as usize / (255 * d.max(1))).min(i16::MAX as usize) as i64;
        let c = (0..d)
            .map(|_| if extreme { 255 } else { rng.next() as u8 })
            .collect();
        let p = (0..d)
            .map(|_| {
                if extreme {
                    p_max as i16
                } else {
                    ((rng.next() % (2 * p_max as u64 + 1)) as i64 - p_max) as i16
                }
            })
            .collect();
        (c, p)
    }

    #[test]
    fn every_kernel_on_this_machine_equals_the_portable_loop() {
        let kernels = available();
        eprintln!(
            "kernels here: {:?}",
            kernels.iter().map(|k| k.0).collect::<Vec<_>>()
        );
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for d in (0..140).chain([255, 256, 257, 511, 512, 513, 1024, 1536, 4096]) {
            for extreme in [false, true] {
                let (c, p) = case(d, &mut rng, extreme);
                let want: i64 = c
                    .iter()
                    .zip(&p)
                    .map(|(x, y)| i64::from(*x) * i64::from(*y))
                    .sum();
                for (name, k) in &kernels {
                    assert_eq!(i64::from(k(&c, &p)), want, "{name} d={d}");
                    // Slices of unequal length: the shorter one counts.
                    if d > 0 {
                        assert_eq!(k(&c[1..], &p), k(&c[1..], &p[..d - 1]), "{name} d={d}");
                    }
                }
            }
        }
    }
}
