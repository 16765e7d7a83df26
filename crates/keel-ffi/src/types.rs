//! Plain data that crosses the FFI: values, options, progress (and the adapter that
//! hands the kernel's progress to a foreign listener), reports, stats.

use std::sync::Arc;
use std::time::Duration;

use crate::bytes::Bytes;
use crate::callbacks::{guarded, Foreign};
use crate::error::{CallbackError, KeelError};
use crate::keys::Encryption;
use keel_storage::{OpenPhase as KPhase, StoreOptions, SyncPolicies, SyncPolicy as KPolicy};

/// A field value: a primary-key part, or the constant of a filter.
///
/// Mapping from FlatBuffers types: `bool` → `Bool`; every integer type and enums →
/// `Integer` (`ulong` as its i64 bit pattern); `float`/`double` → `Real`; `string`
/// → `Text`; `[ubyte]` → `Blob`; absent → `Null`.
///
/// ```
/// use keel_ffi::Value;
/// let v = Value::Integer { v: 7 };
/// assert_eq!(keel_schema::Value::from(v), keel_schema::Value::Int(7));
/// ```
#[derive(Debug, Clone, PartialEq, uniffi::Enum)]
pub enum Value {
    /// Absent / SQL NULL.
    Null,
    /// A `bool`.
    Bool {
        /// The value.
        v: bool,
    },
    /// Any integer type or an enum's underlying value.
    Integer {
        /// The value.
        v: i64,
    },
    /// `float` or `double`.
    Real {
        /// The value.
        v: f64,
    },
    /// A `string`.
    Text {
        /// The value.
        v: String,
    },
    /// A byte vector.
    Blob {
        /// The value.
        v: Vec<u8>,
    },
}

impl From<Value> for keel_schema::Value {
    fn from(v: Value) -> Self {
        match v {
            Value::Null => keel_schema::Value::Null,
            Value::Bool { v } => keel_schema::Value::Bool(v),
            Value::Integer { v } => keel_schema::Value::Int(v),
            Value::Real { v } => keel_schema::Value::Float(v),
            Value::Text { v } => keel_schema::Value::Text(v),
            Value::Blob { v } => keel_schema::Value::Blob(v),
        }
    }
}

impl From<keel_schema::Value> for Value {
    fn from(v: keel_schema::Value) -> Self {
        match v {
            keel_schema::Value::Null => Value::Null,
            keel_schema::Value::Bool(v) => Value::Bool { v },
            keel_schema::Value::Int(v) => Value::Integer { v },
            keel_schema::Value::Float(v) => Value::Real { v },
            keel_schema::Value::Text(v) => Value::Text { v },
            keel_schema::Value::Blob(v) => Value::Blob { v },
        }
    }
}

/// How a sync is performed; chosen per reason in [`OpenOptions`]. See
/// `docs/durability.md` for what each survives.
///
/// ```
/// use keel_ffi::SyncPolicy;
/// let demo = SyncPolicy::SimulatedLatency { delay_ms: 2000 };
/// assert!(matches!(demo, SyncPolicy::SimulatedLatency { .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Enum)]
pub enum SyncPolicy {
    /// F_FULLFSYNC on Apple, fsync elsewhere: survives app crash, OS crash and power
    /// loss. The default.
    Full,
    /// F_BARRIERFSYNC on Apple, fdatasync elsewhere.
    Barrier,
    /// SQLite's `synchronous=NORMAL`: commits are not synced, checkpoints are.
    Normal,
    /// Never sync (tests, caches).
    Off,
    /// For demos and tests: sleep `delay_ms` on the syncing (keel) thread, then do
    /// a `Full` sync. Makes a slow-storage launch reproducible anywhere.
    SimulatedLatency {
        /// Added latency per sync, in milliseconds.
        delay_ms: u64,
    },
}

impl SyncPolicy {
    pub(crate) fn to_kernel(&self) -> KPolicy {
        match self {
            SyncPolicy::Full => KPolicy::Full,
            SyncPolicy::Barrier => KPolicy::Barrier,
            SyncPolicy::Normal => KPolicy::Normal,
            SyncPolicy::Off => KPolicy::Off,
            SyncPolicy::SimulatedLatency { delay_ms } => {
                let d = Duration::from_millis(*delay_ms);
                KPolicy::custom(move |ctx| {
                    std::thread::sleep(d);
                    ctx.full_sync()
                })
            }
        }
    }
}

/// How to open a database. Every field has a default, so `OpenOptions()` is what
/// most apps want.
///
/// ```
/// use keel_ffi::{OpenOptions, SyncPolicy};
/// let o = OpenOptions { open_barrier_sync: Some(SyncPolicy::SimulatedLatency { delay_ms: 10 }),
///                       ..OpenOptions::default() };
/// assert_eq!(o.readers, 4);
/// ```
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct OpenOptions {
    /// Sync policy for commits (default `Full`).
    #[uniffi(default = None)]
    pub commit_sync: Option<SyncPolicy>,
    /// Sync policy for checkpoints (default `Full`).
    #[uniffi(default = None)]
    pub checkpoint_sync: Option<SyncPolicy>,
    /// Sync policy for the open barrier on a WAL left by a previous run (default
    /// `Full`; this is the sync that takes seconds on some iPhones).
    #[uniffi(default = None)]
    pub open_barrier_sync: Option<SyncPolicy>,
    /// Read-only connections in the pool (at least 1).
    #[uniffi(default = 4)]
    pub readers: u32,
    /// WAL size in bytes that triggers a background checkpoint (default 4 MiB).
    #[uniffi(default = None)]
    pub checkpoint_threshold_bytes: Option<u64>,
    /// Opt-in: move a corrupt file (or one whose `-wal` belongs to another
    /// database) aside (never deleted) and start fresh.
    #[uniffi(default = false)]
    pub recover_corrupt: bool,
    /// Opt-in: take over an SQLite file another application created, instead of
    /// refusing it with `ForeignFile`.
    #[uniffi(default = false)]
    pub adopt_foreign: bool,
    /// Opt-in: share changes with other processes that open the same file (an
    /// app and its extensions through an App Group, Android processes): their
    /// commits reach this database's live queries, object and dictionary
    /// subscriptions. Every process opening the file must set it. See
    /// `docs/app-groups.md`.
    #[uniffi(default = false)]
    pub share_changes: bool,
    /// Memory for the in-memory copies of vector fields that nearest queries
    /// scan (default 64 MiB for all of them; 0 turns the copies off, and every
    /// nearest query reads the vectors from the file). A field whose floats do
    /// not fit is kept as 8-bit codes alone (a quarter of the size), its
    /// candidates' floats read from the file; one whose codes do not fit is
    /// read from the file. See `docs/vector.md`.
    #[uniffi(default = None)]
    pub vector_cache_bytes: Option<u64>,
    /// Encrypt the database (SQLCipher) with the data key from `encryption.key`: the
    /// app's `KeyProvider` or a key file. Without it the file is plaintext. An
    /// encrypted file must always be opened with its key; see `docs/encryption.md`.
    #[uniffi(default = None)]
    pub encryption: Option<Encryption>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            commit_sync: None,
            checkpoint_sync: None,
            open_barrier_sync: None,
            readers: 4,
            checkpoint_threshold_bytes: None,
            recover_corrupt: false,
            adopt_foreign: false,
            share_changes: false,
            vector_cache_bytes: None,
            encryption: None,
        }
    }
}

impl OpenOptions {
    /// The kernel's options; `InvalidArgument` for encryption in a build without it.
    pub(crate) fn to_store_options(&self) -> Result<StoreOptions, KeelError> {
        let p = |o: &Option<SyncPolicy>| o.as_ref().map_or(KPolicy::Full, SyncPolicy::to_kernel);
        let mut o = StoreOptions::default()
            .sync(SyncPolicies {
                commit: p(&self.commit_sync),
                checkpoint: p(&self.checkpoint_sync),
                open_barrier: p(&self.open_barrier_sync),
            })
            .readers(usize::try_from(self.readers).unwrap_or(4))
            .recover_corrupt(self.recover_corrupt)
            .adopt_foreign(self.adopt_foreign)
            .share_changes(self.share_changes);
        if let Some(t) = self.checkpoint_threshold_bytes {
            o = o.checkpoint_threshold(t);
        }
        if let Some(b) = self.vector_cache_bytes {
            // More than the address space holds is "no limit" in effect.
            o = o.vector_cache_bytes(usize::try_from(b).unwrap_or(usize::MAX));
        }
        match &self.encryption {
            Some(e) => e.apply(o),
            None => Ok(o),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::OpenOptions;

    #[test]
    fn the_vector_copy_budget_reaches_the_store() {
        let default = OpenOptions::default().to_store_options().unwrap();
        assert_eq!(default.vector_cache_bytes, 64 << 20);
        for (asked, got) in [(0u64, 0usize), (256 << 20, 256 << 20)] {
            let o = OpenOptions {
                vector_cache_bytes: Some(asked),
                ..OpenOptions::default()
            };
            assert_eq!(o.to_store_options().unwrap().vector_cache_bytes, got);
        }
    }
}

/// A phase of the open pipeline, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum OpenPhase {
    /// Directory, permissions, header checks, the writer connection.
    Prepare,
    /// Durability barrier on a WAL left by a previous run (the slow one on iOS).
    SyncWal,
    /// First read transaction: SQLite rebuilds the wal-index.
    Recover,
    /// Optional checkpoint (normally deferred to the background).
    Checkpoint,
    /// Collection tables and indexes.
    Schema,
    /// Reader pool warm; the database is ready.
    Ready,
}

impl From<KPhase> for OpenPhase {
    fn from(p: KPhase) -> Self {
        match p {
            KPhase::Prepare => OpenPhase::Prepare,
            KPhase::SyncWal => OpenPhase::SyncWal,
            KPhase::Recover => OpenPhase::Recover,
            KPhase::Checkpoint => OpenPhase::Checkpoint,
            KPhase::Schema => OpenPhase::Schema,
            KPhase::Ready => OpenPhase::Ready,
        }
    }
}

/// The two milestones of an open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum Milestone {
    /// Reads, queries and subscriptions work; writes are accepted and queued.
    /// `open_async` resolves here.
    Readable,
    /// The open barrier (the sync of a WAL a previous run left) is done: writes
    /// commit, checkpoints run. `Database.durable()` resolves here.
    Durable,
}

impl From<keel_storage::Milestone> for Milestone {
    fn from(m: keel_storage::Milestone) -> Self {
        match m {
            keel_storage::Milestone::Readable => Milestone::Readable,
            keel_storage::Milestone::Durable => Milestone::Durable,
        }
    }
}

/// One progress event of `open_async`: sent when each phase starts
/// (`milestone = null`), then at each milestone: `Readable` (when `open_async`
/// resolves) and finally `Durable` with `done = true` and `fraction = 1.0`. The
/// `Durable` event can come after `open_async` returned the database: keep the
/// listener until `done`.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct OpenProgress {
    /// The phase starting (or, with a milestone, the last phase reached).
    pub phase: OpenPhase,
    /// Overall progress, 0.0 ..= 1.0.
    pub fraction: f32,
    /// True only for the final event (durable).
    pub done: bool,
    /// Set on the two milestone events.
    pub milestone: Option<Milestone>,
}

/// Receives open progress. **Called on a keel thread** (`keel-open`), never on the
/// caller's: hop to your UI thread / event loop before touching UI
/// (`DispatchQueue.main`, `Dispatchers.Main`, `loop.call_soon_threadsafe`). The
/// thin Swift and Kotlin layers do that hop for you (`AsyncStream` / `Flow`).
/// An exception thrown by the listener is caught, logged and ignored.
#[uniffi::export(callback_interface)]
pub trait OpenProgressListener: Send + Sync {
    /// One progress event.
    fn on_progress(&self, progress: OpenProgress) -> Result<(), CallbackError>;
}

/// The progress callback for the store's options: `l`, called through
/// `guarded` (`callbacks.rs`) on the open's thread.
pub(crate) fn progress_fn(l: Box<dyn OpenProgressListener>) -> keel_storage::ProgressFn {
    let l = Arc::new(Foreign::new(l));
    Arc::new(move |p: keel_storage::OpenProgress| {
        let ev = OpenProgress {
            phase: p.phase.into(),
            fraction: p.fraction,
            done: p.done,
            milestone: p.milestone.map(Milestone::from),
        };
        guarded("open progress", || l.on_progress(ev));
    })
}

/// One line of the [`OpenReport`].
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct PhaseReport {
    /// The phase.
    pub phase: OpenPhase,
    /// Wall time spent in it, in milliseconds.
    pub duration_ms: f64,
    /// Syncs issued during it.
    pub syncs: u64,
    /// A short human note.
    pub note: String,
}

/// Where the open time went, phase by phase. `text` is the same as a tree.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct OpenReport {
    /// The database file.
    pub path: String,
    /// Total wall time of the open pipeline, in milliseconds.
    pub total_ms: f64,
    /// When the database became readable, in milliseconds from the start.
    pub readable_ms: f64,
    /// When it became durable (writes commit), in milliseconds from the start;
    /// null while the open barrier runs or if it failed.
    pub durable_ms: Option<f64>,
    /// Size of the WAL when the open started.
    pub wal_bytes_at_open: u64,
    /// WAL frames SQLite recovered.
    pub frames_recovered: u64,
    /// Syncs issued by the whole open.
    pub syncs_issued: u64,
    /// True if the open created the file.
    pub created: bool,
    /// Where a bad file was moved by `recover_corrupt`.
    pub moved_aside: Option<String>,
    /// One entry per phase, in order.
    pub phases: Vec<PhaseReport>,
    /// The report as a printable tree.
    pub text: String,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl From<&keel_storage::OpenReport> for OpenReport {
    fn from(r: &keel_storage::OpenReport) -> Self {
        OpenReport {
            path: r.path.display().to_string(),
            total_ms: ms(r.total),
            readable_ms: ms(r.readable_after),
            durable_ms: r.durable_after.map(ms),
            wal_bytes_at_open: r.wal_bytes_at_open,
            frames_recovered: r.frames_recovered,
            syncs_issued: r.syncs_issued,
            created: r.created,
            moved_aside: r.moved_aside.as_ref().map(|p| p.display().to_string()),
            phases: r
                .phases
                .iter()
                .map(|p| PhaseReport {
                    phase: p.phase.into(),
                    duration_ms: ms(p.duration),
                    syncs: p.syncs,
                    note: p.note.clone(),
                })
                .collect(),
            text: r.to_string(),
        }
    }
}

/// I/O counters for one file kind.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct FileStats {
    /// Read calls.
    pub reads: u64,
    /// Write calls.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Syncs issued.
    pub syncs: u64,
    /// Total time in syncs, in milliseconds.
    pub sync_time_ms: f64,
    /// Longest single sync, in milliseconds.
    pub max_sync_ms: f64,
    /// Truncate calls.
    pub truncates: u64,
}

impl From<keel_storage::FileStats> for FileStats {
    fn from(s: keel_storage::FileStats) -> Self {
        FileStats {
            reads: s.reads,
            writes: s.writes,
            bytes_read: s.bytes_read,
            bytes_written: s.bytes_written,
            syncs: s.syncs,
            sync_time_ms: ms(s.sync_time),
            max_sync_ms: ms(s.max_sync),
            truncates: s.truncates,
        }
    }
}

/// Physical I/O since open, per file kind, as seen by keel's VFS shim.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct IoStats {
    /// The main database file.
    pub main_db: FileStats,
    /// The WAL.
    pub wal: FileStats,
    /// Rollback journals.
    pub journal: FileStats,
    /// Temp files and anything else.
    pub other: FileStats,
    /// Syncs issued for commits.
    pub commit_syncs: u64,
    /// Syncs issued for checkpoints.
    pub checkpoint_syncs: u64,
    /// Syncs issued by the open barrier.
    pub open_barrier_syncs: u64,
    /// Directory syncs after a new WAL/journal file was created (not counted above).
    pub dir_syncs: u64,
    /// Syncs that fell back to `fsync` because the file system does not support the
    /// policy's primitive (`F_FULLFSYNC`/`F_BARRIERFSYNC` refused with `ENOTSUP` or
    /// `EINVAL`, e.g. on a network volume). Any other failure fails the sync.
    pub sync_fallbacks: u64,
}

impl From<keel_storage::IoStats> for IoStats {
    fn from(s: keel_storage::IoStats) -> Self {
        IoStats {
            main_db: s.main_db.into(),
            wal: s.wal.into(),
            journal: s.journal.into(),
            other: s.other.into(),
            commit_syncs: s.commit_syncs,
            checkpoint_syncs: s.checkpoint_syncs,
            open_barrier_syncs: s.open_barrier_syncs,
            dir_syncs: s.dir_syncs,
            sync_fallbacks: s.sync_fallbacks,
        }
    }
}

/// What a checkpoint did.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct CheckpointResult {
    /// True if readers or the writer were in the way past the bounded wait.
    pub busy: bool,
    /// Frames in the WAL.
    pub wal_frames: i64,
    /// Frames copied back into the database.
    pub checkpointed_frames: i64,
    /// Wall time, in milliseconds.
    pub duration_ms: f64,
    /// Size of the WAL file afterwards.
    pub wal_bytes_after: u64,
}

impl From<keel_storage::CheckpointOutcome> for CheckpointResult {
    fn from(o: keel_storage::CheckpointOutcome) -> Self {
        CheckpointResult {
            busy: o.busy,
            wal_frames: o.wal_frames,
            checkpointed_frames: o.checkpointed_frames,
            duration_ms: ms(o.duration),
            wal_bytes_after: o.wal_bytes_after,
        }
    }
}

/// What `suspend` did.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct SuspendResult {
    /// True if a write or read in flight had to be interrupted (it failed with
    /// `Suspended`; nothing of it committed).
    pub interrupted: bool,
    /// False if the database was suspended already.
    pub newly_suspended: bool,
    /// From the call to no lock held, in milliseconds.
    pub duration_ms: f64,
}

impl From<keel_storage::SuspendReport> for SuspendResult {
    fn from(r: keel_storage::SuspendReport) -> Self {
        SuspendResult {
            interrupted: r.interrupted,
            newly_suspended: r.newly_suspended,
            duration_ms: ms(r.duration),
        }
    }
}

/// What `release_memory` gave back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct MemoryReleased {
    /// Bytes of vector-field copies dropped.
    pub vector_copy_bytes: u64,
    /// Idle reader connections closed.
    pub reader_connections: u64,
}

impl From<keel_query::MemoryReleased> for MemoryReleased {
    fn from(m: keel_query::MemoryReleased) -> Self {
        MemoryReleased {
            vector_copy_bytes: m.vector_copy_bytes,
            reader_connections: m.reader_connections,
        }
    }
}

/// What `resume` found.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct ResumeResult {
    /// False if the database was not suspended.
    pub was_suspended: bool,
    /// Another process changed the file meanwhile; live queries and object
    /// subscriptions are read again and deliver what differs.
    pub external_changes: bool,
    /// How long it was suspended, in milliseconds.
    pub suspended_ms: f64,
}

impl From<keel_storage::ResumeReport> for ResumeResult {
    fn from(r: keel_storage::ResumeReport) -> Self {
        ResumeResult {
            was_suspended: r.was_suspended,
            external_changes: r.external_changes,
            suspended_ms: ms(r.suspended_for),
        }
    }
}

/// One operation of a [`Database::write`](crate::Database::write) batch. Objects
/// are FlatBuffers bytes whose root is the collection's table (made by the app's
/// `flatc` code); they are verified against the schema before anything is written.
#[derive(Debug, Clone, PartialEq, uniffi::Enum)]
pub enum WriteOp {
    /// Insert; fails with `AlreadyExists` if the key or a unique value is taken.
    Insert {
        /// Collection name (full `ns.Table` or bare `Table`).
        collection: String,
        /// The object.
        bytes: Vec<u8>,
    },
    /// Replace the object with the same primary key; `NotFound` if none.
    Update {
        /// Collection name.
        collection: String,
        /// The object.
        bytes: Vec<u8>,
    },
    /// Insert, or replace the object with the same primary key.
    Upsert {
        /// Collection name.
        collection: String,
        /// The object.
        bytes: Vec<u8>,
    },
    /// Set some fields of the object with primary key `key`, by value. Only these
    /// fields are written, on top of the version stored when the batch runs (a
    /// change built from a stale object cannot revert another write); a `Null`
    /// value clears the field. Scalars, enums (as their number), strings and
    /// `[ubyte]` (as `Blob`) can be set this way; set table, struct, union and other
    /// vector fields with [`WriteOp::ChangeFrom`]. Setting a primary-key field moves
    /// the object to the new key (a delete and an insert). `NotFound` if no object
    /// has `key`.
    Change {
        /// Collection name.
        collection: String,
        /// The object's primary key (values in key-field order).
        key: Vec<Value>,
        /// The fields to set.
        values: Vec<FieldValue>,
    },
    /// Set the fields named in `fields` of the object with primary key `key` to
    /// their values in `bytes` (an object of the collection's table, e.g. the
    /// app's modified copy encoded by its `flatc` code; a field absent there is
    /// cleared). Every other field keeps its stored value. What a typed change
    /// request in Swift or Kotlin sends: its object plus the names of the setters
    /// called.
    ChangeFrom {
        /// Collection name.
        collection: String,
        /// The object's primary key before the change.
        key: Vec<Value>,
        /// An object holding the new values.
        bytes: Vec<u8>,
        /// Names of the fields to take from `bytes`.
        fields: Vec<String>,
    },
    /// Delete the object with this primary key (values in key-field order).
    Delete {
        /// Collection name.
        collection: String,
        /// The primary key.
        key: Vec<Value>,
    },
}

/// One field of a [`WriteOp::Change`]: its name and new value.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct FieldValue {
    /// Field name (a field of the collection's table).
    pub field: String,
    /// The new value (`Null` clears the field).
    pub value: Value,
}

/// The result of one [`WriteOp`], in batch order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum WriteResult {
    /// Insert, update, upsert or change: the object's rowid.
    Written {
        /// SQLite rowid of the object.
        rowid: i64,
    },
    /// Delete: whether the object existed.
    Deleted {
        /// True if something was deleted.
        existed: bool,
    },
}

/// One stored object: rowid and FlatBuffers bytes (verified against the schema when
/// keel stored them; a read checks that they still open, and the bindings' readers
/// refuse deeper damage done by another tool with a decode error).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct StoredObject {
    /// SQLite rowid.
    pub rowid: i64,
    /// The object's FlatBuffers bytes.
    pub bytes: Bytes,
}

/// One object with the objects its reference field names
/// (`Query::all_including`).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct IncludedObject {
    /// The object.
    pub object: StoredObject,
    /// The objects its reference names, in the order of its keys (at most one
    /// for a to-one reference; keys naming no object are left out).
    pub related: Vec<StoredObject>,
}

/// One object with the count over its reference field
/// (`Query::count_including`).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct IncludedCount {
    /// The object.
    pub object: StoredObject,
    /// How many objects its reference names that exist.
    pub count: u64,
}

impl From<keel_query::StoredObject> for StoredObject {
    fn from(o: keel_query::StoredObject) -> Self {
        StoredObject {
            rowid: o.rowid,
            bytes: Bytes(o.bytes),
        }
    }
}
