//! The vector kernel: what a nearest query runs on, below the waist.
//!
//! * [`column`](mod@column) — a vector field's check on write, the exact k-nearest-neighbour
//!   scan, and the packed side table's life beside its collection.
//! * [`cache`] — the in-memory copy of a packed column and its generation check
//!   (held by the engine).
//! * [`codes`] — each copied vector's 8-bit codes, and the bounds of the coarse pass
//!   that picks the candidates.
//! * [`kernel`] — the coarse pass's inner loop, the widest this CPU runs
//!   (AVX-512BW, AVX2, NEON or portable), picked at run time.
//! * [`scan_helper`] — the database's one parked thread that shares a long coarse
//!   pass.
//!
//! The side table's SQL is in `layout::vector_table`; the builders that queries use
//! are in `query::nearest`, live k-NN in `subscribe::nearest`.

pub(crate) mod cache;
pub(crate) mod codes;
pub(crate) mod column;
// The one module of the crate with `unsafe`: SIMD intrinsics behind run-time
// feature detection, each block with its reason (see the module's doc).
#[allow(unsafe_code)]
pub(crate) mod kernel;
pub(crate) mod scan_helper;
