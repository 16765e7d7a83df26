//! An in-memory copy of a vector field's packed column, so that a nearest query
//! reads one contiguous array of floats instead of asking SQLite for every 2 KB
//! row (which is where the scan's time went: ~2.4 µs a row, of which the
//! distance loop is a few percent).
//!
//! # When a copy may answer: the generation
//!
//! The copy is only ever used when it holds exactly the rows the query's
//! snapshot holds. Every write closure that writes a `"<collection>$vec"`
//! table stores a fresh `random()` in `keel_meta` under
//! `vector-gen:<collection>`, once, in its own savepoint (`engine.rs`
//! `Inner::commit_closure`); every other SQLite writer of the file — stock
//! SQLite, an older build — runs the table's triggers, which count it up by one
//! for each row they write (keel's writer holds a marker row while it writes,
//! so the triggers skip its rows: `layout/vector_table.rs`). A copy records the
//! generation and the file's schema cookie it was read at, and answers a query
//! only when the query's snapshot shows both unchanged:
//!
//! * a commit that touched the table has a new generation, so the copy is
//!   stale and the query scans SQLite (and refreshes the copy) — unless the
//!   commit was this handle's own, which patches the copy instead (below);
//! * a snapshot older than the copy shows an older generation: it scans too;
//! * a copy is built only from a committed snapshot, never inside a write
//!   transaction, so a generation a rolled-back transaction reached names no
//!   copy; keel's own writes store a fresh random value and other writers' only
//!   count up from it, so a committed generation never comes back to name other
//!   rows;
//! * a dropped and recreated table (a rebuild, a migration, an older build of
//!   the app without the triggers) changes the schema cookie; a copy is built
//!   only when the table's triggers exist.
//!
//! Reading the generation and the cookie costs two point reads per query.
//!
//! # Patched after this handle's own writes
//!
//! Reading the table again after every write would cost the first query after
//! it ~100 steady ones (the whole column read, every vector coded). The writer
//! knows what it changed: each closure keeps the rows it wrote to a vector
//! table ([`Written`]), reads the generation before its own (the one a copy of
//! the state it started from carries) and the one it stores. After COMMIT, on
//! the writer thread and before the write's future resolves, a copy still at
//! the old generation gets those rows — floats, norm and codes, each row in
//! place — and the new generation: the rows it then holds are the committed
//! ones, exactly. A copy at any other generation (another writer came
//! between) is left stale and read again by the next query. A closure of more
//! than [`KEPT_ROWS`] rows, or one that began while no copy of its collection
//! existed, keeps no rows: its commit only moves the generation.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::layout::vector_table::{packed, VectorSql};
use crate::vector::codes::Codes;
use crate::vector::scan_helper::ScanHelper;

/// The rows of one vector field as of one generation: rowids ascending, their
/// vectors back to back (unless only the codes fit), each vector's norm, and
/// their codes for the coarse pass (`vector/codes.rs`).
#[derive(Debug, Clone)]
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
    /// the budget (`floats_kept` false): the candidates' floats are then read
    /// from the side table.
    pub(crate) floats: Vec<f32>,
    /// Whether `floats` holds every row's floats.
    pub(crate) floats_kept: bool,
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
        self.floats_kept
    }

    /// Row `rowid` now holds `x` (`None`: no vector, so no row): the rowids
    /// stay ascending, and its floats, norm and codes are what a read of the
    /// table would have made of it.
    fn apply(&mut self, rowid: i64, x: Option<&[f32]>) {
        let d = self.dimensions;
        let codes = Arc::make_mut(&mut self.codes);
        match (self.rowids.binary_search(&rowid), x) {
            (Ok(i), Some(x)) => {
                if self.floats_kept {
                    self.floats[i * d..(i + 1) * d].copy_from_slice(x);
                }
                self.norms2[i] = keel_schema::vector::dot(x, x);
                codes.set(i, x);
            }
            (Err(i), Some(x)) => {
                self.rowids.insert(i, rowid);
                if self.floats_kept {
                    self.floats.splice(i * d..i * d, x.iter().copied());
                }
                self.norms2.insert(i, keel_schema::vector::dot(x, x));
                codes.insert(i, x);
            }
            (Ok(i), None) => {
                self.rowids.remove(i);
                if self.floats_kept {
                    self.floats.drain(i * d..(i + 1) * d);
                }
                self.norms2.remove(i);
                codes.remove(i);
            }
            (Err(_), None) => {}
        }
    }

    /// The vector of the `i`-th row.
    pub(crate) fn vector(&self, i: usize) -> &[f32] {
        &self.floats[i * self.dimensions..(i + 1) * self.dimensions]
    }
}

/// Rows a write closure keeps per collection for patching the copies; past
/// this the commit only moves the generation (and the next query reads the
/// table, which costs less than keeping so many rows' bytes).
pub(crate) const KEPT_ROWS: usize = 4096;

/// The vector-table rows one write closure wrote, per collection, in order.
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// Collections whose vector table the closure wrote, in first-write order.
    pub(crate) colls: Vec<CollWrites>,
    /// The writer's marker row (`layout/vector_table.rs`) is in `keel_meta`.
    pub(crate) marked: bool,
}

/// The rows one closure wrote to one collection's vector table.
#[derive(Debug)]
pub(crate) struct CollWrites {
    /// The collection.
    pub(crate) name: String,
    /// `(rowid, the object's bytes)` in write order (`None`: the row was
    /// deleted); `None` when not kept (no copy to patch, or too many rows).
    pub(crate) rows: Option<Vec<(i64, Option<Vec<u8>>)>>,
}

impl Written {
    /// Nothing written.
    pub(crate) fn is_empty(&self) -> bool {
        self.colls.is_empty()
    }

    /// The rows of `collection`, made when it is first written; `keep`
    /// says whether rows are worth keeping (a copy of it exists).
    fn coll(&mut self, collection: &str, keep: impl FnOnce() -> bool) -> &mut CollWrites {
        let i = match self.colls.iter().position(|c| c.name == collection) {
            Some(i) => i,
            None => {
                self.colls.push(CollWrites {
                    name: collection.to_owned(),
                    rows: keep().then(Vec::new),
                });
                self.colls.len() - 1
            }
        };
        &mut self.colls[i]
    }

    /// Row `rowid` of `collection` now holds the object `bytes` (`None`:
    /// deleted). `keep`: whether a copy of the collection exists.
    pub(crate) fn row(
        &mut self,
        collection: &str,
        rowid: i64,
        bytes: Option<&[u8]>,
        keep: impl FnOnce() -> bool,
    ) {
        let c = self.coll(collection, keep);
        if let Some(rows) = &mut c.rows {
            if rows.len() >= KEPT_ROWS {
                c.rows = None;
            } else {
                rows.push((rowid, bytes.map(<[u8]>::to_vec)));
            }
        }
    }

    /// The row `from` of `collection` moved to `to` (a key change).
    pub(crate) fn moved(&mut self, collection: &str, from: i64, to: i64) {
        if let Some(c) = self.colls.iter_mut().find(|c| c.name == collection) {
            if let Some(rows) = &mut c.rows {
                if let Some(last) = rows.iter_mut().rev().find(|r| r.0 == from) {
                    last.0 = to;
                }
                rows.push((from, None));
            }
        }
    }

    /// Where a savepoint starts: [`Written::rollback_to`] forgets what came after.
    pub(crate) fn mark(&self) -> Vec<Option<usize>> {
        self.colls
            .iter()
            .map(|c| c.rows.as_ref().map(Vec::len))
            .collect()
    }

    /// The savepoint `mark` was taken at rolled back: its rows are gone (and so
    /// may the marker row be, which the next write puts back).
    pub(crate) fn rollback_to(&mut self, mark: &[Option<usize>]) {
        for (i, c) in self.colls.iter_mut().enumerate() {
            match (mark.get(i).copied().flatten(), &mut c.rows) {
                (Some(n), Some(rows)) => rows.truncate(n),
                // Written for the first time inside the savepoint: nothing
                // of it is left, and what stays is kept for nobody.
                (None, Some(_)) if i >= mark.len() => c.rows = Some(Vec::new()),
                _ => {}
            }
        }
        self.marked = false;
    }
}

/// What the copies of one database did: how often one was read from its side
/// table whole, and how often one was patched in place after this handle's
/// own write ([`Database::vector_copy_stats`](crate::db::database::Database::vector_copy_stats)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct VectorCopyStats {
    /// Copies read from their side table (the first query of a field, and the
    /// first after a write this handle did not patch).
    pub reads: u64,
    /// Copies patched with a commit's rows.
    pub patches: u64,
}

/// The copies of one database's vector fields, keyed by `(collection, field id)`,
/// and the helper thread that shares a long pass over one.
#[derive(Debug)]
pub(crate) struct VectorCache {
    budget: usize,
    copies: Mutex<HashMap<(String, u16), Arc<Packed>>>,
    helper: ScanHelper,
    reads: AtomicU64,
    patches: AtomicU64,
}

impl VectorCache {
    /// An empty cache holding at most `budget` bytes.
    pub(crate) fn new(budget: usize) -> VectorCache {
        VectorCache {
            budget,
            copies: Mutex::new(HashMap::new()),
            helper: ScanHelper::default(),
            reads: AtomicU64::new(0),
            patches: AtomicU64::new(0),
        }
    }

    /// What the copies did so far.
    pub(crate) fn stats(&self) -> VectorCopyStats {
        VectorCopyStats {
            reads: self.reads.load(Ordering::Relaxed),
            patches: self.patches.load(Ordering::Relaxed),
        }
    }

    /// Whether a copy of any field of `collection` is held (so a write's rows
    /// are worth keeping for [`VectorCache::patch`]).
    pub(crate) fn holds(&self, collection: &str) -> bool {
        let copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        copies.keys().any(|(c, _)| c == collection)
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

    /// Keep `copy`, just read from the side table, for `collection`'s field
    /// `field` (see [`VectorCache::keep`]).
    pub(crate) fn put(&self, collection: &str, field: u16, copy: Arc<Packed>) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.keep(collection, field, copy);
    }

    /// After the commit of a write closure that wrote `rows` (in order) to
    /// `v`, `collection`'s vector table, moving its generation from `from` to
    /// `to`: each field's copy still at `from` gets the rows and `to`. A copy
    /// some query still reads is copied first (that query goes on with the
    /// rows of its snapshot). A copy that outgrows the budget keeps its codes
    /// alone, or goes.
    pub(crate) fn patch(
        &self,
        collection: &str,
        v: &VectorSql,
        from: i64,
        to: i64,
        rows: &[(i64, Option<Vec<u8>>)],
    ) {
        let mut x: Vec<f32> = Vec::new();
        for f in &v.fields {
            let key = (collection.to_owned(), f.id);
            let taken = {
                let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
                match copies.get(&key) {
                    Some(p) if p.generation == from => copies.remove(&key),
                    _ => None,
                }
            };
            let Some(copy) = taken else { continue };
            let mut copy = Arc::try_unwrap(copy).unwrap_or_else(|shared| (*shared).clone());
            let dims = copy.dimensions;
            for (rowid, bytes) in rows {
                // What a read of the table keeps of the packed value: a BLOB
                // of `dims` floats (keel's writes never pack another).
                let vector = bytes
                    .as_deref()
                    .and_then(|b| packed(f, b))
                    .filter(|p| p.len() == dims * 4)
                    .map(|p| {
                        keel_schema::vector::unpack_into(p, &mut x);
                        x.as_slice()
                    });
                copy.apply(*rowid, vector);
            }
            copy.generation = to;
            if copy.bytes() > self.budget && copy.floats_kept {
                copy.floats = Vec::new();
                copy.floats_kept = false;
            }
            self.patches.fetch_add(1, Ordering::Relaxed);
            self.keep(collection, f.id, Arc::new(copy));
        }
    }

    /// Keep `copy` for `collection`'s field `field`, evicting the other copies
    /// when the total would pass the budget. A copy over the budget alone is
    /// not kept.
    fn keep(&self, collection: &str, field: u16, copy: Arc<Packed>) {
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
