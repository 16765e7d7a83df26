//! Options for [`Store::open`](crate::store::Store::open) / [`Store::open_async`](crate::store::Store::open_async).

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "encryption-api")]
use crate::encryption::KeyProvider;
use crate::error::{Error, Result};
use crate::policy::{SyncPolicies, SyncPolicy};
#[cfg(feature = "sim")]
use crate::sim::{PlatformSync, SimDisk, StatementTrace};

/// The phases of the open pipeline, in order.
///
/// ```
/// use keel_storage::OpenPhase;
/// assert_eq!(OpenPhase::ALL.len(), 6);
/// assert_eq!(OpenPhase::SyncWal.name(), "sync_wal");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpenPhase {
    /// Directory, permissions (0600 for a new file), header and size sanity checks,
    /// VFS registration, the writer connection.
    Prepare,
    /// Durability barrier on a non-empty WAL left by a previous run, through
    /// [`SyncPolicies::open_barrier`]. Runs on a keel thread (`keel-barrier`) in
    /// parallel with the phases after it; the store becomes durable when it ends.
    SyncWal,
    /// First read transaction: SQLite rebuilds the wal-index from the WAL; pragmas.
    Recover,
    /// PASSIVE checkpoint if the WAL is over the threshold and
    /// [`StoreOptions::checkpoint_on_open`] is set (after the barrier: a checkpoint
    /// writes); otherwise deferred to the background.
    Checkpoint,
    /// The layer above's [`StoreOptions::schema_hook`], in one transaction. While the
    /// barrier runs, the hook's changes are staged in that transaction and commit
    /// when the store becomes durable.
    Schema,
    /// Reader pool and checkpointer connection opened: the store is readable.
    /// The writer and checkpointer threads start at durable.
    Ready,
}

impl OpenPhase {
    /// All phases in pipeline order.
    pub const ALL: [OpenPhase; 6] = [
        OpenPhase::Prepare,
        OpenPhase::SyncWal,
        OpenPhase::Recover,
        OpenPhase::Checkpoint,
        OpenPhase::Schema,
        OpenPhase::Ready,
    ];

    /// Short name, also the `tracing` span name suffix.
    pub fn name(self) -> &'static str {
        match self {
            OpenPhase::Prepare => "prepare",
            OpenPhase::SyncWal => "sync_wal",
            OpenPhase::Recover => "recover",
            OpenPhase::Checkpoint => "checkpoint",
            OpenPhase::Schema => "schema",
            OpenPhase::Ready => "ready",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The two milestones of an open.
///
/// * **Readable**: the file was checked, SQLite rebuilt its wal-index from the WAL and
///   the schema was read: reads, snapshots and live-query subscriptions work.
///   [`Store::open_async`](crate::store::Store::open_async) resolves here.
/// * **Durable**: the open barrier (the sync of a WAL left by a previous run) is
///   done: writes commit and checkpoints run. [`Store::durable`](crate::store::Store::durable)
///   resolves here; the blocking [`Store::open`](crate::store::Store::open) returns here.
///
/// With an empty WAL (a fresh file, or a clean close last time) both come at once.
///
/// ```
/// use keel_storage::Milestone;
/// assert_eq!(Milestone::Readable.name(), "readable");
/// assert_eq!(Milestone::Durable.name(), "durable");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Milestone {
    /// Reads and subscriptions work; writes are queued.
    Readable,
    /// Writes commit; checkpoints run.
    Durable,
}

impl Milestone {
    /// Short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Milestone::Readable => "readable",
            Milestone::Durable => "durable",
        }
    }
}

/// A progress event from the open pipeline: emitted when each phase starts (with
/// `milestone: None`), then once at each [`Milestone`]: `Readable` (phase `Ready`)
/// and finally `Durable` (phase `Ready`, fraction `1.0`, `done`). The `Durable`
/// event may come after [`Store::open_async`](crate::store::Store::open_async) resolved:
/// the callback keeps being called after the store was handed over.
///
/// ```
/// use keel_storage::{OpenPhase, OpenProgress};
/// let p = OpenProgress { phase: OpenPhase::Recover, fraction: 0.5, done: false, milestone: None };
/// assert!(p.fraction <= 1.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpenProgress {
    /// The phase starting (or, with a milestone, the last phase reached).
    pub phase: OpenPhase,
    /// Overall progress, 0.0 ..= 1.0.
    pub fraction: f32,
    /// True only for the final event (the store is durable).
    pub done: bool,
    /// Set on the two milestone events.
    pub milestone: Option<Milestone>,
}

/// What the schema hook gets: the writer connection inside the schema transaction.
///
/// ```
/// use keel_storage::{Store, StoreOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// let opts = StoreOptions::default().schema_hook(|ctx| {
///     ctx.execute_batch("CREATE TABLE IF NOT EXISTS post(id INTEGER PRIMARY KEY, body BLOB)")?;
///     Ok(())
/// });
/// let store = Store::open(dir.path().join("s.db"), opts)?;
/// # Ok::<(), keel_storage::Error>(())
/// ```
pub struct SchemaCtx<'a> {
    pub(crate) conn: &'a rusqlite::Connection,
    pub(crate) path: &'a Path,
    pub(crate) created: bool,
    pub(crate) progress: Option<&'a ProgressFn>,
    pub(crate) note: Option<String>,
}

impl SchemaCtx<'_> {
    /// The database file.
    pub fn path(&self) -> &Path {
        self.path
    }
    /// True if this open created the database (or replaced a corrupt one).
    pub fn created(&self) -> bool {
        self.created
    }
    /// Report how far long-running work of the hook is (`within`: the fraction of
    /// it done, `0.0 ..= 1.0`) — e.g. a storage-format upgrade rewriting every
    /// object — as an [`OpenPhase::Schema`] event of
    /// [`StoreOptions::on_progress`], its `fraction` between this phase's start
    /// and the next one's.
    pub fn progress(&self, within: f32) {
        let Some(cb) = self.progress else {
            return;
        };
        let n = OpenPhase::ALL.len() as f32;
        let p = OpenProgress {
            phase: OpenPhase::Schema,
            fraction: (OpenPhase::Schema.index() as f32 + within.clamp(0.0, 1.0)) / n,
            done: false,
            milestone: None,
        };
        // As every progress event: a panicking callback does not fail the open.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(p))).is_err() {
            tracing::error!(phase = p.phase.name(), "progress callback panicked");
        }
    }

    /// Say what the hook did, for the [`OpenReport`](crate::report::OpenReport): the text
    /// becomes the schema phase's note (e.g. "storage format 1 → 2").
    pub fn note(&mut self, text: impl Into<String>) {
        self.note = Some(text.into());
    }

    /// An [`Error::Schema`] for this file.
    pub fn error(&self, message: impl Into<String>) -> Error {
        Error::Schema {
            path: self.path.to_path_buf(),
            message: message.into(),
        }
    }
}

impl std::ops::Deref for SchemaCtx<'_> {
    type Target = rusqlite::Connection;
    fn deref(&self) -> &rusqlite::Connection {
        self.conn
    }
}

/// Progress callback type (see [`StoreOptions::on_progress`]).
pub type ProgressFn = Arc<dyn Fn(OpenProgress) + Send + Sync>;
/// Per-connection initializer type (see [`StoreOptions::connection_init`]).
pub type ConnectionInit = Arc<dyn Fn(&rusqlite::Connection) -> rusqlite::Result<()> + Send + Sync>;
/// Schema hook type (see [`StoreOptions::schema_hook`]).
pub type SchemaHook = Box<dyn FnOnce(&mut SchemaCtx<'_>) -> Result<()> + Send>;

/// How to open a store. `Default` is what most apps want; every field is public and
/// there are builder methods for the common ones.
///
/// ```
/// use keel_storage::{StoreOptions, SyncPolicy};
/// use std::time::Duration;
/// let opts = StoreOptions::default()
///     .commit_sync(SyncPolicy::Normal)
///     .readers(2)
///     .checkpoint_threshold(1 << 20)
///     .idle_checkpoint_after(Duration::from_millis(500))
///     .recover_corrupt(true)
///     .on_progress(|p| eprintln!("{:?} {:.0}%", p.phase, p.fraction * 100.0));
/// assert_eq!(opts.reader_pool_size, 2);
/// ```
pub struct StoreOptions {
    /// Sync policy per reason. Default: `Full` everywhere.
    pub sync: SyncPolicies,
    /// Read-only connections in the pool (default: 4, at least 1).
    pub reader_pool_size: usize,
    /// WAL size (bytes of frames) that triggers a background PASSIVE checkpoint.
    /// Default 4 MiB. Also used as `journal_size_limit`.
    pub checkpoint_threshold_bytes: u64,
    /// A PASSIVE checkpoint also runs after this long without commits (default 2 s).
    pub idle_checkpoint_delay: Duration,
    /// Bounded wait for TRUNCATE checkpoints (`on_background`, `close`). Default 1 s.
    pub truncate_timeout: Duration,
    /// SQLite busy timeout for the writer and at open (default 5 s).
    pub busy_timeout: Duration,
    /// Run a PASSIVE checkpoint in the open pipeline when the WAL is over the
    /// threshold (default `false`: the background checkpointer does it right after open).
    pub checkpoint_on_open: bool,
    /// Incremental vacuum runs in the background when at least this many pages are
    /// free (default 256).
    pub vacuum_min_free_pages: u32,
    /// Most closures run in one group commit (default 512).
    pub max_group_size: usize,
    /// Backpressure: at most this many writes wait in the writer queue (default
    /// 10 000). A [`Store::write`](crate::store::Store::write) beyond it resolves at once
    /// with [`Error::QueueFull`] without running its closure,
    /// so a producer faster than the disk meets a bound instead of growing memory
    /// without limit. [`Store::write_blocking`](crate::store::Store::write_blocking) waits
    /// for room instead (it blocks anyway).
    pub max_queued_writes: usize,
    /// How long a read waits for a pooled connection when all are in use (default
    /// 10 s); then it fails with [`Error::ReadersBusy`].
    pub reader_wait: Duration,
    /// Opt-in: if the file is not a database or is corrupt, move it (and its -wal/-shm)
    /// aside as `<name>.corrupt-<UTC timestamp>` and create a fresh database.
    /// User data is never deleted. Default `false`.
    pub recover_corrupt: bool,
    /// Called on the open thread with each [`OpenProgress`].
    pub progress: Option<ProgressFn>,
    /// Run on every connection keel opens (writer, readers, checkpointer), e.g. to
    /// register SQL functions.
    pub connection_init: Option<ConnectionInit>,
    /// Run in the schema phase on the writer connection inside a transaction.
    pub schema_hook: Option<SchemaHook>,
    /// A simulated disk behind the VFS shim (crash and fault testing; feature `sim`).
    #[cfg(feature = "sim")]
    pub sim: Option<Arc<SimDisk>>,
    /// An injected Apple sync primitive (feature `sim`; see [`crate::sim::PlatformSync`]).
    #[cfg(feature = "sim")]
    pub platform_sync: Option<PlatformSync>,
    /// Called with the SQL of every statement the writer thread starts (feature
    /// `sim`): tests count the work a write costs with it.
    #[cfg(feature = "sim")]
    pub statement_trace: Option<StatementTrace>,
    /// Stamp the databases keel creates with keel's identity and check it at open:
    /// another application's SQLite file is refused ([`Error::ForeignFile`]),
    /// a `-wal` of another database is refused as damage
    /// ([`Error::ForeignWal`]). Default `false` for the bare
    /// storage kernel; the object layer (`keel_query::Database`) turns it on.
    /// keel then owns the header's `application_id` and `user_version` (the stamp and
    /// the WAL epoch): do not set them from a `connection_init` hook or a closure.
    /// See `docs/durability.md`.
    pub keel_identity: bool,
    /// With `keel_identity`: take over an SQLite file of another application instead
    /// of refusing it (keel adds its tables, switches it to WAL and stamps it).
    /// Default `false`.
    pub adopt_foreign: bool,
    /// Share changes with other processes that open the same file (an app and its
    /// extensions, Android processes): every commit also records what it changed
    /// in a change log inside the database and signals other processes, and this
    /// process's live queries, object and dictionary subscriptions follow what
    /// others commit. Every process that opens the file must set it. Default
    /// `false`: a single-process app pays nothing. The storage kernel only
    /// carries the flag; the object layer (`keel_query::Database`) implements it.
    /// See `docs/app-groups.md`.
    pub share_changes: bool,
    /// Bytes of memory the object layer may keep of vector fields' packed
    /// columns, so that a nearest query reads from memory instead of SQLite
    /// rows (default 64 MiB). A 512-d vector takes 2,588 bytes with its floats
    /// (25,900 fit the default) and 540 with its 8-bit codes alone (124,000):
    /// a field whose floats do not fit is kept as codes, and each query reads
    /// its few candidates' floats from the file; a field whose codes do not
    /// fit is scanned from the file on every query; 0 turns the copies off.
    /// The storage kernel only carries the number; see `docs/vector.md`.
    pub vector_cache_bytes: usize,
    /// Encrypt the database (features `encryption`, `encryption-system-crypto`): the provider gives its data
    /// key, once per open. Default `None`: a plaintext file, exactly as without
    /// the feature. See [`StoreOptions::encryption`] and `docs/encryption.md`.
    #[cfg(feature = "encryption-api")]
    pub encryption: Option<Arc<dyn KeyProvider>>,
    /// With `encryption`: keep the file's first 32 bytes plaintext (SQLCipher's
    /// plaintext header), for files in a shared container. Default `false`.
    #[cfg(feature = "encryption-api")]
    pub plaintext_header: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sync: SyncPolicies::default(),
            reader_pool_size: 4,
            checkpoint_threshold_bytes: 4 << 20,
            idle_checkpoint_delay: Duration::from_secs(2),
            truncate_timeout: Duration::from_secs(1),
            busy_timeout: Duration::from_secs(5),
            checkpoint_on_open: false,
            vacuum_min_free_pages: 256,
            max_group_size: 512,
            max_queued_writes: 10_000,
            reader_wait: Duration::from_secs(10),
            recover_corrupt: false,
            progress: None,
            connection_init: None,
            schema_hook: None,
            #[cfg(feature = "sim")]
            sim: None,
            #[cfg(feature = "sim")]
            platform_sync: None,
            #[cfg(feature = "sim")]
            statement_trace: None,
            keel_identity: false,
            adopt_foreign: false,
            share_changes: false,
            vector_cache_bytes: 64 << 20,
            #[cfg(feature = "encryption-api")]
            encryption: None,
            #[cfg(feature = "encryption-api")]
            plaintext_header: false,
        }
    }
}

impl fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("StoreOptions");
        f.field("sync", &self.sync)
            .field("reader_pool_size", &self.reader_pool_size)
            .field(
                "checkpoint_threshold_bytes",
                &self.checkpoint_threshold_bytes,
            )
            .field("idle_checkpoint_delay", &self.idle_checkpoint_delay)
            .field("truncate_timeout", &self.truncate_timeout)
            .field("busy_timeout", &self.busy_timeout)
            .field("checkpoint_on_open", &self.checkpoint_on_open)
            .field("vacuum_min_free_pages", &self.vacuum_min_free_pages)
            .field("max_group_size", &self.max_group_size)
            .field("max_queued_writes", &self.max_queued_writes)
            .field("reader_wait", &self.reader_wait)
            .field("recover_corrupt", &self.recover_corrupt)
            .field("progress", &self.progress.is_some())
            .field("connection_init", &self.connection_init.is_some())
            .field("schema_hook", &self.schema_hook.is_some())
            .field("keel_identity", &self.keel_identity)
            .field("adopt_foreign", &self.adopt_foreign)
            .field("share_changes", &self.share_changes)
            .field("vector_cache_bytes", &self.vector_cache_bytes);
        #[cfg(feature = "encryption-api")]
        f.field("encryption", &self.encryption.is_some())
            .field("plaintext_header", &self.plaintext_header);
        f.finish()
    }
}

impl StoreOptions {
    /// Encrypt the store with the key `provider` gives (features `encryption`, `encryption-system-crypto`):
    /// SQLCipher encrypts every page of the file and its WAL. The provider is asked
    /// once per open ([`KeyPurpose::Create`](crate::encryption::KeyPurpose::Create)
    /// for a new database, [`KeyPurpose::Open`](crate::encryption::KeyPurpose::Open)
    /// for an existing one); the store keeps the key until it closes. A provider
    /// without a key makes the open fail with [`Error::KeyUnavailable`] or
    /// [`Error::KeyLost`]; a file that does not decrypt fails with
    /// [`Error::WrongKey`], a plaintext file with [`Error::NotEncrypted`]. None of
    /// them changes the files.
    ///
    /// ```
    /// use keel_storage::encryption::KeyFile;
    /// use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let key = KeyFile::new(dir.path().join("app.key"));
    /// let store = Store::open(dir.path().join("app.db"), StoreOptions::default().encryption(key))?;
    /// store.close()?;
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    #[cfg(feature = "encryption-api")]
    pub fn encryption(mut self, provider: impl KeyProvider + 'static) -> Self {
        self.encryption = Some(Arc::new(provider));
        self
    }
    /// Keep the first 32 bytes of an encrypted file plaintext (feature
    /// `encryption`), for a file an app and its extensions share. The setting is part of how the file is read: opening with the
    /// other setting fails with [`Error::WrongKey`].
    #[cfg(feature = "encryption-api")]
    pub fn plaintext_header(mut self, on: bool) -> Self {
        self.plaintext_header = on;
        self
    }
    /// Set all three sync policies.
    pub fn sync(mut self, p: SyncPolicies) -> Self {
        self.sync = p;
        self
    }
    /// Set the commit sync policy.
    pub fn commit_sync(mut self, p: SyncPolicy) -> Self {
        self.sync.commit = p;
        self
    }
    /// Set the checkpoint sync policy.
    pub fn checkpoint_sync(mut self, p: SyncPolicy) -> Self {
        self.sync.checkpoint = p;
        self
    }
    /// Set the open-barrier sync policy.
    pub fn open_barrier_sync(mut self, p: SyncPolicy) -> Self {
        self.sync.open_barrier = p;
        self
    }
    /// Reader pool size (at least 1).
    pub fn readers(mut self, n: usize) -> Self {
        self.reader_pool_size = n.max(1);
        self
    }
    /// WAL bytes that trigger a background checkpoint.
    pub fn checkpoint_threshold(mut self, bytes: u64) -> Self {
        self.checkpoint_threshold_bytes = bytes;
        self
    }
    /// Idle delay before a background checkpoint.
    pub fn idle_checkpoint_after(mut self, d: Duration) -> Self {
        self.idle_checkpoint_delay = d;
        self
    }
    /// Busy timeout.
    pub fn busy_timeout(mut self, d: Duration) -> Self {
        self.busy_timeout = d;
        self
    }
    /// Writer queue bound (see [`StoreOptions::max_queued_writes`]; at least 1).
    pub fn max_queued_writes(mut self, n: usize) -> Self {
        self.max_queued_writes = n.max(1);
        self
    }
    /// Bound on a read's wait for a pooled connection (see [`StoreOptions::reader_wait`]).
    pub fn reader_wait(mut self, d: Duration) -> Self {
        self.reader_wait = d;
        self
    }
    /// Opt in to moving bad files aside.
    pub fn recover_corrupt(mut self, yes: bool) -> Self {
        self.recover_corrupt = yes;
        self
    }
    /// Progress callback.
    pub fn on_progress(mut self, f: impl Fn(OpenProgress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }
    /// Per-connection initializer.
    pub fn connection_init(
        mut self,
        f: impl Fn(&rusqlite::Connection) -> rusqlite::Result<()> + Send + Sync + 'static,
    ) -> Self {
        self.connection_init = Some(Arc::new(f));
        self
    }
    /// Put a simulated disk behind the store's VFS shim (feature `sim`): crash points,
    /// power loss and fault injection. See [`crate::sim`].
    #[cfg(feature = "sim")]
    pub fn sim_disk(mut self, disk: Arc<SimDisk>) -> Self {
        self.sim = Some(disk);
        self
    }
    /// Check and stamp keel's file identity (see [`StoreOptions::keel_identity`]).
    pub fn keel_identity(mut self, yes: bool) -> Self {
        self.keel_identity = yes;
        self
    }
    /// Take over another application's SQLite file instead of refusing it.
    ///
    /// ```
    /// use keel_storage::StoreOptions;
    /// let opts = StoreOptions::default().keel_identity(true).adopt_foreign(true);
    /// assert!(opts.adopt_foreign);
    /// ```
    pub fn adopt_foreign(mut self, yes: bool) -> Self {
        self.adopt_foreign = yes;
        self
    }
    /// Share changes with other processes opening the same file (see
    /// [`StoreOptions::share_changes`](StoreOptions#structfield.share_changes)).
    ///
    /// ```
    /// use keel_storage::StoreOptions;
    /// let opts = StoreOptions::default().share_changes(true);
    /// assert!(opts.share_changes);
    /// ```
    pub fn share_changes(mut self, yes: bool) -> Self {
        self.share_changes = yes;
        self
    }
    /// Memory for vector fields' in-memory copies
    /// ([`vector_cache_bytes`](Self::vector_cache_bytes)); 0 turns them off.
    ///
    /// ```
    /// # use keel_storage::StoreOptions;
    /// let opts = StoreOptions::default().vector_cache_bytes(0);
    /// assert_eq!(opts.vector_cache_bytes, 0);
    /// ```
    pub fn vector_cache_bytes(mut self, bytes: usize) -> Self {
        self.vector_cache_bytes = bytes;
        self
    }
    /// Schema hook.
    pub fn schema_hook(
        mut self,
        f: impl FnOnce(&mut SchemaCtx<'_>) -> Result<()> + Send + 'static,
    ) -> Self {
        self.schema_hook = Some(Box::new(f));
        self
    }
}
