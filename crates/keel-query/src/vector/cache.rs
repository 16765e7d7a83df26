//! An in-memory copy of a vector field's packed column, so that a nearest query
//! reads one contiguous array of floats instead of asking SQLite for every 2 KB
//! row (which is where the scan's time went: ~2.4 µs a row, of which the
//! distance loop is a few percent).
//!
//! # When a copy may answer: the generation
//!
//! The copy is only ever used when it holds exactly the rows the query's
//! snapshot holds. Every write to a `"<collection>$vec"` table — keel's own
//! writes, a rollback-free rebuild, and any other SQLite writer, since it lives
//! in the file — runs the table's triggers, which store a fresh `random()` in
//! `keel_meta` under `vector-gen:<collection>` (see `layout/vector_table.rs`). A copy
//! records the generation and the file's schema cookie it was read at, and
//! answers a query only when the query's snapshot shows both unchanged:
//!
//! * a commit that touched the table has a new generation, so the copy is
//!   stale and the query scans SQLite (and refreshes the copy);
//! * a snapshot older than the copy shows an older generation: it scans too;
//! * generations are random, not counted, so the values of a transaction that
//!   rolled back never come back to name other rows;
//! * a dropped and recreated table (a rebuild, a migration, an older build of
//!   the app without the triggers) changes the schema cookie; a copy is built
//!   only when the table's triggers exist.
//!
//! Reading the generation and the cookie costs two point reads per query.
//!
//! # Memory
//!
//! The copies of one database share a budget,
//! [`StoreOptions::vector_cache_bytes`](keel_storage::StoreOptions::vector_cache_bytes)
//! (default 64 MiB). A copy holds, per vector, its floats, its 8-bit codes and
//! their bounds (`vector/codes.rs`), its squared norm (so a cosine distance is
//! one dot product) and its rowid: 2,588 bytes for 512 dimensions, so 25,900
//! such vectors fit the default. When the floats do not fit but the codes do
//! (540 bytes a vector: 124,000 of them), the copy keeps the codes alone and a
//! query reads its few candidates' floats from the side table. A field whose
//! codes do not fit is not copied and every query of it scans SQLite; a copy
//! that would push the total past the budget evicts the others first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::vector::codes::Codes;
use crate::vector::scan_helper::ScanHelper;

/// The rows of one vector field as of one generation: rowids ascending, their
/// vectors back to back (unless only the codes fit), each vector's norm, and
/// their codes for the coarse pass (`vector/codes.rs`).
#[derive(Debug)]
pub(crate) struct Packed {
    /// The generation (`keel_meta` `vector-gen:<collection>`) it was read at.
    pub(crate) generation: i64,
    /// The file's schema cookie it was read at.
    pub(crate) cookie: i64,
    /// Floats per vector.
    pub(crate) dimensions: usize,
    /// Rowids, ascending (the scan's tie-break order).
    pub(crate) rowids: Vec<i64>,
    /// `rowids.len() × dimensions` floats, or none when only the codes fit
    /// the budget: the candidates' floats are then read from the side table.
    pub(crate) floats: Vec<f32>,
    /// Each vector's squared norm (`dot(v, v)`).
    pub(crate) norms2: Vec<f32>,
    /// Each vector's codes and bounds (shared with the helper thread).
    pub(crate) codes: Arc<Codes>,
}

/// Bytes a copy holds per row besides its floats and codes: the rowid and the
/// squared norm.
pub(crate) const ROW_BYTES: usize = 12;

impl Packed {
    /// Bytes this copy holds.
    pub(crate) fn bytes(&self) -> usize {
        self.floats.len() * 4 + self.rowids.len() * ROW_BYTES + self.codes.bytes()
    }

    /// Whether the floats are held (not only the codes).
    pub(crate) fn has_floats(&self) -> bool {
        self.floats.len() == self.rowids.len() * self.dimensions
    }

    /// The vector of the `i`-th row.
    pub(crate) fn vector(&self, i: usize) -> &[f32] {
        &self.floats[i * self.dimensions..(i + 1) * self.dimensions]
    }
}

/// The copies of one database's vector fields, keyed by `(collection, field id)`,
/// and the helper thread that shares a long pass over one.
#[derive(Debug)]
pub(crate) struct VectorCache {
    budget: usize,
    copies: Mutex<HashMap<(String, u16), Arc<Packed>>>,
    helper: ScanHelper,
}

impl VectorCache {
    /// An empty cache holding at most `budget` bytes.
    pub(crate) fn new(budget: usize) -> VectorCache {
        VectorCache {
            budget,
            copies: Mutex::new(HashMap::new()),
            helper: ScanHelper::default(),
        }
    }

    /// The helper thread for the coarse pass, if this machine has a core for it.
    pub(crate) fn helper(&self) -> Option<&ScanHelper> {
        ScanHelper::worthwhile().then_some(&self.helper)
    }

    /// Bytes one field's copy may hold (a copy larger than this is not kept).
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    /// The copy of `collection`'s field `field` if it was read at `generation`
    /// and `cookie`.
    pub(crate) fn get(
        &self,
        collection: &str,
        field: u16,
        generation: i64,
        cookie: i64,
    ) -> Option<Arc<Packed>> {
        let copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        copies
            .get(&(collection.to_owned(), field))
            .filter(|p| p.generation == generation && p.cookie == cookie)
            .cloned()
    }

    /// Keep `copy` for `collection`'s field `field`, evicting the other copies
    /// when the total would pass the budget. A copy over the budget alone is
    /// not kept.
    pub(crate) fn put(&self, collection: &str, field: u16, copy: Arc<Packed>) {
        if copy.bytes() > self.budget {
            return;
        }
        let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        copies.remove(&(collection.to_owned(), field));
        let held: usize = copies.values().map(|p| p.bytes()).sum();
        if held + copy.bytes() > self.budget {
            copies.clear();
        }
        copies.insert((collection.to_owned(), field), copy);
    }

    /// Drop every copy (a memory warning); the next query of a field reads it
    /// again. Returns the bytes the copies held.
    pub(crate) fn release(&self) -> usize {
        let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        let held = copies.values().map(|p| p.bytes()).sum();
        copies.clear();
        held
    }
}
