//! The VFS shim: a pass-through over SQLite's `unix` VFS that routes `xSync` through
//! the store's [`SyncPolicies`] and counts I/O per file kind.
//!
//! One VFS instance is registered per open store (name `keel-<n>`, `pAppData` → the
//! store's [`VfsShared`]); it is unregistered when the last connection using it has
//! closed (every keel connection holds an `Arc<VfsRegistration>`). Each opened file is a
//! [`KeelFile`] header followed by the real `unix` file; every method forwards to the
//! real file's method table, and the method table we expose has the same `iVersion` as
//! the real one (so xShm* / xFetch / xUnfetch exist exactly when the real file has them
//! — WAL needs xShm*).
//!
//! This is the only module with `unsafe` code.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use libsqlite3_sys as ffi;

use crate::encryption::Cipher;
use crate::options::StoreOptions;
#[cfg(feature = "sim")]
use crate::paths::wal_path;
use crate::policy::{
    current_reason, record_sync_error, FileKind, SyncContext, SyncPolicies, SyncPolicy, SyncReason,
};
#[cfg(feature = "sim")]
use crate::sim::{Gate, PlatformSync, SimDisk};
use crate::stats::Counters;

/// State shared by a store's VFS instance, its files and the store.
pub(crate) struct VfsShared {
    pub(crate) db_path: PathBuf,
    pub(crate) policies: SyncPolicies,
    pub(crate) counters: Counters,
    /// The store's data key, if it is encrypted: every connection opened through
    /// this VFS instance is keyed with it first (`conn::open_conn`), so a connection
    /// opened late never asks the key provider. Dropped, and zeroed, with the
    /// store's last connection. The shim itself never reads it. A rotation of
    /// the open store (or its adoption of a file another process rotated)
    /// replaces it while every connection is closed.
    pub(crate) cipher: std::sync::Mutex<Option<Arc<Cipher>>>,
    /// The simulated disk behind this store, if any (tests only).
    #[cfg(feature = "sim")]
    pub(crate) sim: Option<Arc<SimDisk>>,
    /// An injected Apple `fcntl` primitive (tests only; see `StoreOptions::platform_sync`).
    #[cfg(feature = "sim")]
    pub(crate) platform_sync: Option<PlatformSync>,
}

impl VfsShared {
    /// The shared state of a store of the file `db_path` opened with `opts`,
    /// keyed with `cipher` if it is encrypted; nothing counted yet.
    pub(crate) fn new(
        db_path: &Path,
        opts: &StoreOptions,
        cipher: Option<Arc<Cipher>>,
    ) -> VfsShared {
        VfsShared {
            db_path: db_path.to_path_buf(),
            policies: opts.sync.clone(),
            counters: Counters::default(),
            cipher: std::sync::Mutex::new(cipher),
            #[cfg(feature = "sim")]
            sim: opts.sim.clone(),
            #[cfg(feature = "sim")]
            platform_sync: opts.platform_sync.clone(),
        }
    }

    /// The key every connection opened now is keyed with.
    pub(crate) fn cipher(&self) -> Option<Arc<Cipher>> {
        self.cipher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Key the connections opened from now on with `cipher` (none: plaintext).
    #[cfg_attr(not(feature = "encryption-api"), allow(dead_code))]
    pub(crate) fn set_cipher(&self, cipher: Option<Arc<Cipher>>) {
        *self.cipher.lock().unwrap_or_else(|p| p.into_inner()) = cipher;
    }
}

/// A file known to the simulated disk.
#[cfg(feature = "sim")]
pub(crate) type SimRef<'a> = Option<(&'a SimDisk, usize)>;

/// Turn a simulated-disk refusal into SQLite's return code (remembering a sync error
/// so keel can report [`Error::SyncFailed`](crate::error::Error)).
#[cfg(feature = "sim")]
fn sim_refused(rc: c_int, errno: i32, sync: Option<(FileKind, SyncReason)>) -> c_int {
    if let Some((kind, reason)) = sync {
        let e = std::io::Error::from_raw_os_error(errno);
        record_sync_error(kind, reason, e);
    }
    rc
}

// Declared in `policy`, below this module, so that `error` and `sim` need not
// import the VFS.
use crate::policy::Primitive;

/// The primitive a built-in policy runs; `apple` selects the Apple column of the
/// table. `None`: no sync at all (`Off`). A `Custom` policy picks per call and
/// lands here through [`SyncContext`]'s primitives.
pub(crate) fn select(p: &SyncPolicy, apple: bool) -> Option<Primitive> {
    match (p, apple) {
        (SyncPolicy::Off, _) => None,
        (SyncPolicy::Full | SyncPolicy::Custom(_), true) => Some(Primitive::FullFsync),
        (SyncPolicy::Barrier, true) => Some(Primitive::BarrierFsync),
        (SyncPolicy::Full | SyncPolicy::Custom(_), false) => Some(Primitive::Fsync),
        (SyncPolicy::Barrier, false) => Some(Primitive::Fdatasync),
        (SyncPolicy::Normal, _) => Some(Primitive::Fsync),
    }
}

/// The platform's own `fcntl` sync (`F_FULLFSYNC` / `F_BARRIERFSYNC`): the one
/// function per platform that issues it. Not on Apple there is none: the caller
/// never selects these primitives there (see [`select`]).
#[cfg(target_vendor = "apple")]
fn apple_fcntl(fd: c_int, p: Primitive) -> std::io::Result<()> {
    let op = match p {
        Primitive::FullFsync => libc::F_FULLFSYNC,
        Primitive::BarrierFsync => libc::F_BARRIERFSYNC,
        Primitive::Fsync | Primitive::Fdatasync => return plain_fsync(fd),
    };
    // SAFETY: fcntl with F_FULLFSYNC / F_BARRIERFSYNC takes no pointer argument; `fd`
    // is an open descriptor owned by SQLite (or by the caller) for the whole call.
    let rc = unsafe { libc::fcntl(fd, op) };
    if rc == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// True for the errors by which a file system says it does not support an `fcntl`
/// sync (network and FUSE file systems): only these fall back to `fsync`, as SQLite
/// does. Anything else (EIO above all) fails the sync.
pub(crate) fn unsupported(e: &std::io::Error) -> bool {
    // ENOTSUP and EOPNOTSUPP are the same number on Linux, not on Apple.
    e.raw_os_error()
        .is_some_and(|c| c == libc::ENOTSUP || c == libc::EOPNOTSUPP || c == libc::EINVAL)
}

/// Run an Apple `fcntl` primitive through `fcntl`, falling back to `fsync` where the
/// file system does not support it. The fallback is counted
/// ([`IoStats::sync_fallbacks`](crate::stats::IoStats)): a sync that could not be as
/// strong as the policy asked is never silent.
pub(crate) fn fcntl_with_fallback(
    fd: c_int,
    p: Primitive,
    fcntl: &dyn Fn(c_int, Primitive) -> std::io::Result<()>,
    counters: &Counters,
) -> std::io::Result<()> {
    match fcntl(fd, p) {
        Ok(()) => Ok(()),
        Err(e) if unsupported(&e) => {
            tracing::warn!(primitive = ?p, error = %e, "sync primitive unsupported here; fell back to fsync");
            counters.sync_fallback();
            plain_fsync(fd)
        }
        Err(e) => Err(e),
    }
}

fn plain_fsync(fd: c_int) -> std::io::Result<()> {
    // SAFETY: fsync takes a descriptor only; `fd` stays open for the whole call.
    let rc = unsafe { libc::fsync(fd) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn data_sync(fd: c_int) -> std::io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: fdatasync takes a descriptor only; `fd` stays open for the whole call.
        let rc = unsafe { libc::fdatasync(fd) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        plain_fsync(fd)
    }
}

/// Run a built-in policy's primitive on a descriptor.
pub(crate) fn sync_fd(shared: &VfsShared, fd: c_int, p: &SyncPolicy) -> std::io::Result<()> {
    // Tests put an injected `fcntl` here to run the Apple column on any platform.
    #[cfg(feature = "sim")]
    if let Some(inj) = &shared.platform_sync {
        let f = |fd: c_int, p: Primitive| inj(fd, p.into());
        return run_primitive(select(p, true), fd, &f, &shared.counters);
    }
    #[cfg(target_vendor = "apple")]
    return run_primitive(select(p, true), fd, &apple_fcntl, &shared.counters);
    #[cfg(not(target_vendor = "apple"))]
    run_primitive(
        select(p, false),
        fd,
        &|_, _| Err(std::io::Error::from_raw_os_error(libc::ENOTSUP)),
        &shared.counters,
    )
}

fn run_primitive(
    p: Option<Primitive>,
    fd: c_int,
    fcntl: &dyn Fn(c_int, Primitive) -> std::io::Result<()>,
    counters: &Counters,
) -> std::io::Result<()> {
    match p {
        None => Ok(()),
        Some(Primitive::Fsync) => plain_fsync(fd),
        Some(Primitive::Fdatasync) => data_sync(fd),
        Some(p @ (Primitive::FullFsync | Primitive::BarrierFsync)) => {
            fcntl_with_fallback(fd, p, fcntl, counters)
        }
    }
}

/// Apply the policy for `reason` to `fd`, counting it. Returns whether a sync was issued.
fn policy_sync(
    shared: &VfsShared,
    kind: FileKind,
    reason: SyncReason,
    fd: Option<c_int>,
    data_only: bool,
    fallback: &dyn Fn() -> std::io::Result<()>,
    #[cfg(feature = "sim")] sim: SimRef<'_>,
) -> std::io::Result<bool> {
    let policy = shared.policies.for_reason(reason);
    let start = Instant::now();
    let real = |p: &SyncPolicy| match fd {
        Some(fd) => sync_fd(shared, fd, p),
        None => fallback(),
    };
    let primitive = |p: SyncPolicy| -> std::io::Result<()> {
        #[cfg(feature = "sim")]
        if let Some((disk, id)) = sim {
            if disk.real_sync() {
                real(&p)?;
            }
            disk.synced(id);
            return Ok(());
        }
        real(&p)
    };
    let ctx = SyncContext {
        kind,
        reason,
        db_path: &shared.db_path,
        data_only,
        primitive: &primitive,
    };
    let res = match policy {
        SyncPolicy::Off => return Ok(false),
        SyncPolicy::Custom(hook) => hook.sync(&ctx),
        p => ctx.run(p.clone()),
    };
    shared.counters.sync(kind, reason, start.elapsed());
    res.map(|()| true)
}

/// keel's own sync of a file it opened itself (the open barrier on the WAL).
pub(crate) fn sync_file(
    shared: &VfsShared,
    kind: FileKind,
    reason: SyncReason,
    file: &std::fs::File,
) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    #[cfg(feature = "sim")]
    let sim = match &shared.sim {
        Some(disk) => {
            let path = match kind {
                FileKind::Wal => wal_path(&shared.db_path),
                _ => shared.db_path.clone(),
            };
            let id = disk.file_id(&path, kind);
            if let Err((_, errno)) = disk.sync(id) {
                return Err(std::io::Error::from_raw_os_error(errno));
            }
            Some((&**disk, id))
        }
        None => None,
    };
    policy_sync(
        shared,
        kind,
        reason,
        Some(fd),
        false,
        &|| plain_fsync(fd),
        #[cfg(feature = "sim")]
        sim,
    )
}

/// Sync a directory, so that a file's entry in it (its creation, a rename) survives
/// a power loss. Counted in `IoStats::dir_syncs`. Skipped under an `Off` policy.
pub(crate) fn sync_dir(shared: &VfsShared, reason: SyncReason, dir: &Path) -> std::io::Result<()> {
    if matches!(shared.policies.for_reason(reason), SyncPolicy::Off) {
        return Ok(());
    }
    #[cfg(feature = "sim")]
    if let Some(disk) = &shared.sim {
        disk.dir_synced(dir);
        shared.counters.dir_sync();
        if !disk.real_sync() {
            return Ok(());
        }
    }
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(feature = "sim")]
    if shared.sim.is_some() {
        return Ok(());
    }
    shared.counters.dir_sync();
    Ok(())
}

/// The data SQLite hands our VFS in `pAppData`.
struct VfsApp {
    base: *mut ffi::sqlite3_vfs,
    shared: Arc<VfsShared>,
}

/// A registered VFS instance. Unregistered on drop.
pub(crate) struct VfsRegistration {
    vfs: Box<ffi::sqlite3_vfs>,
    name: String,
    _cname: CString,
    _app: Box<VfsApp>,
}

// SAFETY: after registration the sqlite3_vfs and VfsApp are never mutated by Rust code;
// SQLite only reads them (the VFS list itself is guarded by SQLite's static mutex).
// VfsShared is Send + Sync.
unsafe impl Send for VfsRegistration {}
// SAFETY: see the Send impl above.
unsafe impl Sync for VfsRegistration {}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Header of every file our VFS opens; the real `unix` file follows at `REAL_OFFSET`.
#[repr(C)]
struct KeelFile {
    base: ffi::sqlite3_file,
    shared: *const VfsShared,
    kind: FileKind,
    fd: c_int,
    /// Directory to fsync after the first sync of a newly created file (owned CString).
    dir_to_sync: *mut c_char,
    /// The file's id on the simulated disk (`usize::MAX`: not simulated).
    #[cfg(feature = "sim")]
    sim_id: usize,
}

const REAL_OFFSET: usize = (std::mem::size_of::<KeelFile>() + 7) & !7;
/// `unixFile` starts with: pMethod, pVfs, pInode (three pointers), then `int h`.
const UNIX_FD_OFFSET: usize = 3 * std::mem::size_of::<*const c_void>();

impl VfsRegistration {
    /// Register a new VFS instance wrapping `unix`.
    pub(crate) fn register(shared: Arc<VfsShared>) -> std::io::Result<Arc<VfsRegistration>> {
        // SAFETY: sqlite3_vfs_find takes a NUL-terminated name (a C literal) and
        // initializes SQLite if needed; the result is null or a VFS that stays
        // registered for the life of the process (the built-in unix VFS).
        let base = unsafe { ffi::sqlite3_vfs_find(c"unix".as_ptr()) };
        if base.is_null() {
            return Err(std::io::Error::other("SQLite has no `unix` VFS"));
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let name = format!("keel-{}-{id}", std::process::id());
        let cname = CString::new(name.clone()).map_err(std::io::Error::other)?;
        let mut app = Box::new(VfsApp { base, shared });
        // SAFETY: `base` is a valid, immutable, process-lifetime VFS (checked non-null).
        let b = unsafe { &*base };
        let sz = REAL_OFFSET + usize::try_from(b.szOsFile).unwrap_or(0);
        let mut vfs = Box::new(ffi::sqlite3_vfs {
            iVersion: 2,
            szOsFile: c_int::try_from(sz).map_err(std::io::Error::other)?,
            mxPathname: b.mxPathname,
            pNext: ptr::null_mut(),
            zName: cname.as_ptr(),
            pAppData: (&mut *app as *mut VfsApp).cast(),
            xOpen: Some(x_open),
            // The unix VFS ignores its `sqlite3_vfs*` argument in every method but
            // xOpen (checked in the bundled sqlite3.c: all are `NotUsed`/UNUSED_PARAMETER),
            // so its functions can be installed directly.
            #[cfg(not(feature = "sim"))]
            xDelete: b.xDelete,
            #[cfg(feature = "sim")]
            xDelete: Some(x_delete),
            xAccess: b.xAccess,
            xFullPathname: b.xFullPathname,
            xDlOpen: b.xDlOpen,
            xDlError: b.xDlError,
            xDlSym: b.xDlSym,
            xDlClose: b.xDlClose,
            xRandomness: b.xRandomness,
            xSleep: b.xSleep,
            xCurrentTime: b.xCurrentTime,
            xGetLastError: b.xGetLastError,
            xCurrentTimeInt64: if b.iVersion >= 2 {
                b.xCurrentTimeInt64
            } else {
                None
            },
            xSetSystemCall: None,
            xGetSystemCall: None,
            xNextSystemCall: None,
        });
        // SAFETY: `vfs` is boxed (stable address) and lives in the returned registration,
        // which unregisters it in Drop before freeing it; `zName` points into `cname`,
        // also owned by the registration.
        let rc = unsafe { ffi::sqlite3_vfs_register(&mut *vfs, 0) };
        if rc != ffi::SQLITE_OK {
            return Err(std::io::Error::other(format!(
                "sqlite3_vfs_register failed with code {rc}"
            )));
        }
        Ok(Arc::new(VfsRegistration {
            vfs,
            name,
            _cname: cname,
            _app: app,
        }))
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The store's shared state (policies, counters).
    pub(crate) fn shared(&self) -> &Arc<VfsShared> {
        &self._app.shared
    }
}

impl Drop for VfsRegistration {
    fn drop(&mut self) {
        // SAFETY: the VFS was registered by `register`; every connection that used it
        // holds an Arc to this registration, so none is left when we get here. Open
        // files keep their own Arc<VfsShared> and do not use the sqlite3_vfs.
        unsafe {
            ffi::sqlite3_vfs_unregister(&mut *self.vfs);
        }
    }
}

fn kind_from_flags(flags: c_int) -> FileKind {
    if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
        FileKind::MainDb
    } else if flags & ffi::SQLITE_OPEN_WAL != 0 {
        FileKind::Wal
    } else if flags & ffi::SQLITE_OPEN_MAIN_JOURNAL != 0 {
        FileKind::Journal
    } else {
        FileKind::Other
    }
}

/// Pointer to the real file that follows our header.
///
/// # Safety
/// `f` must be a file allocated by SQLite with our VFS's `szOsFile`.
unsafe fn real(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: SQLite allocated REAL_OFFSET + unix szOsFile bytes for `f`.
    unsafe { f.cast::<u8>().add(REAL_OFFSET).cast() }
}

/// The real file's method table.
///
/// # Safety
/// `f` must be one of our opened files (its real file has non-null pMethods).
unsafe fn rm(f: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: an opened unix file points at a static method table.
    unsafe { &*(*real(f)).pMethods }
}

/// Our header.
///
/// # Safety
/// `f` must be one of our opened files.
unsafe fn kf<'a>(f: *mut ffi::sqlite3_file) -> &'a KeelFile {
    // SAFETY: our files start with a KeelFile (repr(C), base first).
    unsafe { &*f.cast::<KeelFile>() }
}

fn same_file(fd: c_int, path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    // SAFETY: `st` is a plain C struct for which all-zero is a valid value; fstat
    // writes it and reads only `fd`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer.
    let rc = unsafe { libc::fstat(fd, &mut st) };
    rc == 0 && st.st_dev as u64 == meta.dev() && st.st_ino as u64 == meta.ino()
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    z_name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: `vfs` is our registered VFS; its pAppData is the VfsApp we boxed, alive
    // while the VFS is registered.
    let app = unsafe { &*(*vfs).pAppData.cast::<VfsApp>() };
    let kind = kind_from_flags(flags);
    let path: Option<PathBuf> = if z_name.is_null() {
        None
    } else {
        // SAFETY: SQLite passes a NUL-terminated file name that outlives the file.
        let bytes = unsafe { CStr::from_ptr(z_name) }.to_bytes();
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    };
    // Like SQLite's unix VFS (UNIXFILE_DIRSYNC), whose xSync this shim replaces: the
    // first sync of a WAL or journal opened with CREATE also syncs its directory,
    // whether or not this open created the file — a previous process may have created
    // it and died before its directory entry was durable. A new main database file is
    // created by keel (`check_file`) and, as in SQLite, gets no directory sync: its
    // content reaches the WAL first. (Found by the crash campaign: a WAL created by a
    // session that crashed, reused by the next one, vanished at a power loss with
    // acknowledged commits.)
    let created = flags & ffi::SQLITE_OPEN_CREATE != 0
        && matches!(kind, FileKind::Wal | FileKind::Journal)
        && path.is_some();
    // SAFETY: `file` has szOsFile bytes; clear our header so a failed open leaves
    // pMethods null (SQLite then skips xClose).
    unsafe {
        ptr::write(
            file.cast::<KeelFile>(),
            KeelFile {
                base: ffi::sqlite3_file {
                    pMethods: ptr::null(),
                },
                shared: ptr::null(),
                kind,
                fd: -1,
                dir_to_sync: ptr::null_mut(),
                #[cfg(feature = "sim")]
                sim_id: usize::MAX,
            },
        );
    }
    // SAFETY: forwarding to the unix VFS with the real-file region, which has the
    // unix szOsFile bytes; `app.base` is the process-lifetime unix VFS.
    let rc = unsafe {
        let r = real(file);
        (*r).pMethods = ptr::null();
        match (*app.base).xOpen {
            Some(open) => open(app.base, z_name, r, flags, out_flags),
            None => ffi::SQLITE_CANTOPEN,
        }
    };
    if rc != ffi::SQLITE_OK {
        // SAFETY: if the real open left a method table, the real file must be closed.
        unsafe {
            let r = real(file);
            if !(*r).pMethods.is_null() {
                if let Some(close) = (*(*r).pMethods).xClose {
                    close(r);
                }
            }
        }
        return rc;
    }
    // SAFETY: the unix VFS's file struct (`unixFile`) starts with three pointers and
    // then the descriptor `int h`; we only trust it after checking it refers to the
    // same inode as the path (otherwise syncs go through the real xSync).
    let fd = unsafe { *real(file).cast::<u8>().add(UNIX_FD_OFFSET).cast::<c_int>() };
    let fd = match &path {
        Some(p) if fd >= 0 && same_file(fd, p) => fd,
        _ => -1,
    };
    let dir_to_sync = if created {
        path.as_ref()
            .and_then(|p| p.parent())
            .and_then(|d| CString::new(d.as_os_str().as_bytes()).ok())
            .map_or(ptr::null_mut(), CString::into_raw)
    } else {
        ptr::null_mut()
    };
    // SAFETY: the real file is open; pick the method table with the same iVersion.
    let version = unsafe { rm(file).iVersion };
    let methods: &'static ffi::sqlite3_io_methods = match version {
        1 => &METHODS_V1,
        2 => &METHODS_V2,
        _ => &METHODS_V3,
    };
    let shared = Arc::into_raw(Arc::clone(&app.shared));
    // SAFETY: `file` is ours; fill the header (released in x_close).
    unsafe {
        let k = &mut *file.cast::<KeelFile>();
        k.shared = shared;
        k.fd = fd;
        k.dir_to_sync = dir_to_sync;
        k.base.pMethods = methods;
        #[cfg(feature = "sim")]
        if let (Some(disk), Some(p), true) = (&app.shared.sim, &path, kind != FileKind::Other) {
            k.sim_id = disk.file_id(p, kind);
        }
    }
    ffi::SQLITE_OK
}

/// `xDelete` with the simulated disk told first (sim builds only).
#[cfg(feature = "sim")]
unsafe extern "C" fn x_delete(
    vfs: *mut ffi::sqlite3_vfs,
    z_name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    // SAFETY: `vfs` is our registered VFS (pAppData → VfsApp, alive while registered);
    // `z_name` is a NUL-terminated path from SQLite; forwarding to the process-lifetime
    // unix VFS, which ignores its vfs argument for xDelete.
    unsafe {
        let app = &*(*vfs).pAppData.cast::<VfsApp>();
        if let (Some(disk), false) = (&app.shared.sim, z_name.is_null()) {
            let bytes = CStr::from_ptr(z_name).to_bytes();
            let p = Path::new(std::ffi::OsStr::from_bytes(bytes));
            if let Err((rc, errno)) = disk.delete(p) {
                return sim_refused(rc, errno, None);
            }
        }
        match (*app.base).xDelete {
            Some(d) => d(app.base, z_name, sync_dir),
            None => ffi::SQLITE_IOERR_DELETE,
        }
    }
}

/// The file's simulated disk, if any.
///
/// # Safety
/// `k` must be an open file (its `shared` pointer alive).
#[cfg(feature = "sim")]
unsafe fn sim_of<'a>(k: &KeelFile) -> SimRef<'a> {
    if k.sim_id == usize::MAX {
        return None;
    }
    // SAFETY: the file holds an Arc to its VfsShared until x_close.
    let shared = unsafe { &*k.shared };
    shared.sim.as_deref().map(|d| (d, k.sim_id))
}

/// Ask the file's simulated disk, if it has one, to let `op` through: `Some` is
/// the refusal as SQLite's return code (a read, write or truncate: not a sync, so
/// no sync error is remembered).
///
/// # Safety
/// `k` must be an open file (its `shared` pointer alive).
#[cfg(feature = "sim")]
unsafe fn sim_gate(k: &KeelFile, op: impl FnOnce(&SimDisk, usize) -> Gate) -> Option<c_int> {
    // SAFETY: the caller's guarantee is sim_of's.
    let (disk, id) = unsafe { sim_of(k) }?;
    op(disk, id)
        .err()
        .map(|(rc, errno)| sim_refused(rc, errno, None))
}

unsafe extern "C" fn x_close(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `f` is one of our open files; close the real one, then release what
    // x_open allocated (the Arc and the directory CString), exactly once.
    unsafe {
        let rc = match rm(f).xClose {
            Some(c) => c(real(f)),
            None => ffi::SQLITE_OK,
        };
        let k = &mut *f.cast::<KeelFile>();
        if !k.shared.is_null() {
            drop(Arc::from_raw(k.shared));
            k.shared = ptr::null();
        }
        if !k.dir_to_sync.is_null() {
            drop(CString::from_raw(k.dir_to_sync));
            k.dir_to_sync = ptr::null_mut();
        }
        k.base.pMethods = ptr::null();
        rc
    }
}

unsafe extern "C" fn x_read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: forwarding an open file's call with SQLite's own arguments; `shared` is
    // kept alive by the Arc the file holds.
    unsafe {
        let k = kf(f);
        (*k.shared)
            .counters
            .read(k.kind, u64::try_from(amt).unwrap_or(0));
        #[cfg(feature = "sim")]
        if let Some(rc) = sim_gate(k, |disk, id| disk.read(id)) {
            return rc;
        }
        match rm(f).xRead {
            Some(m) => m(real(f), buf, amt, off),
            None => ffi::SQLITE_IOERR_READ,
        }
    }
}

unsafe extern "C" fn x_write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: as in x_read.
    unsafe {
        let k = kf(f);
        (*k.shared)
            .counters
            .write(k.kind, u64::try_from(amt).unwrap_or(0));
        #[cfg(feature = "sim")]
        if let Some(rc) = sim_gate(k, |disk, id| {
            let data =
                std::slice::from_raw_parts(buf.cast::<u8>(), usize::try_from(amt).unwrap_or(0));
            disk.write(id, u64::try_from(off).unwrap_or(0), data)
        }) {
            return rc;
        }
        match rm(f).xWrite {
            Some(m) => m(real(f), buf, amt, off),
            None => ffi::SQLITE_IOERR_WRITE,
        }
    }
}

unsafe extern "C" fn x_truncate(f: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    // SAFETY: as in x_read.
    unsafe {
        let k = kf(f);
        (*k.shared).counters.truncate(k.kind);
        #[cfg(feature = "sim")]
        if let Some(rc) = sim_gate(k, |disk, id| {
            disk.truncate(id, u64::try_from(size).unwrap_or(0))
        }) {
            return rc;
        }
        match rm(f).xTruncate {
            Some(m) => m(real(f), size),
            None => ffi::SQLITE_IOERR_TRUNCATE,
        }
    }
}

unsafe extern "C" fn x_sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: `f` is open; `shared` is alive (Arc held by the file).
    let (k, shared) = unsafe {
        let k = &mut *f.cast::<KeelFile>();
        let s = &*k.shared;
        (k, s)
    };
    let reason = current_reason();
    let fd = (k.fd >= 0).then_some(k.fd);
    // A sync keel cannot run itself (descriptor unknown) goes to SQLite's own xSync:
    // ask it for its strongest sync whenever the policy is stronger than plain fsync
    // (with `PRAGMA fullfsync`, set at open, that is F_FULLFSYNC on Apple).
    let real_flags = if shared.policies.for_reason(reason).sqlite_fullfsync() {
        (flags & !0x0f) | ffi::SQLITE_SYNC_FULL
    } else {
        flags
    };
    let fallback = || {
        // SAFETY: forwarding to the real file's xSync (descriptor unknown to us).
        let rc = unsafe {
            match rm(f).xSync {
                Some(m) => m(real(f), real_flags),
                None => ffi::SQLITE_OK,
            }
        };
        if rc == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "SQLite xSync failed with {rc}"
            )))
        }
    };
    let data_only = flags & ffi::SQLITE_SYNC_DATAONLY != 0;
    // SAFETY: `k` is an open file.
    #[cfg(feature = "sim")]
    let sim = unsafe { sim_of(k) };
    #[cfg(feature = "sim")]
    if let Some((disk, id)) = sim {
        if let Err((rc, errno)) = disk.sync(id) {
            return sim_refused(rc, errno, Some((k.kind, reason)));
        }
    }
    match policy_sync(
        shared,
        k.kind,
        reason,
        fd,
        data_only,
        &fallback,
        #[cfg(feature = "sim")]
        sim,
    ) {
        Ok(issued) => {
            if issued && !k.dir_to_sync.is_null() {
                // SAFETY: dir_to_sync is the CString x_open leaked; reclaim it once.
                let dir = unsafe { CString::from_raw(k.dir_to_sync) };
                k.dir_to_sync = ptr::null_mut();
                let dir = Path::new(std::ffi::OsStr::from_bytes(dir.as_bytes()));
                #[cfg(feature = "sim")]
                if let Some((disk, _)) = sim {
                    disk.dir_synced(dir);
                    shared.counters.dir_sync();
                    if !disk.real_sync() {
                        return ffi::SQLITE_OK;
                    }
                }
                // Like SQLite, ignore directory-sync errors (unsupported on some file systems).
                if let Ok(d) = std::fs::File::open(dir) {
                    let _ = d.sync_all();
                    shared.counters.dir_sync();
                }
            }
            ffi::SQLITE_OK
        }
        Err(e) => {
            tracing::error!(kind = k.kind.name(), ?reason, error = %e, "sync failed");
            record_sync_error(k.kind, reason, e);
            ffi::SQLITE_IOERR_FSYNC
        }
    }
}

unsafe extern "C" fn x_file_size(f: *mut ffi::sqlite3_file, out: *mut ffi::sqlite3_int64) -> c_int {
    // SAFETY: pure forwarding to the open real file.
    unsafe {
        match rm(f).xFileSize {
            Some(m) => m(real(f), out),
            None => ffi::SQLITE_IOERR_FSTAT,
        }
    }
}

unsafe extern "C" fn x_lock(f: *mut ffi::sqlite3_file, l: c_int) -> c_int {
    // SAFETY: pure forwarding to the open real file.
    unsafe {
        match rm(f).xLock {
            Some(m) => m(real(f), l),
            None => ffi::SQLITE_IOERR_LOCK,
        }
    }
}

unsafe extern "C" fn x_unlock(f: *mut ffi::sqlite3_file, l: c_int) -> c_int {
    // SAFETY: pure forwarding to the open real file.
    unsafe {
        match rm(f).xUnlock {
            Some(m) => m(real(f), l),
            None => ffi::SQLITE_IOERR_UNLOCK,
        }
    }
}

unsafe extern "C" fn x_check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: pure forwarding to the open real file.
    unsafe {
        match rm(f).xCheckReservedLock {
            Some(m) => m(real(f), out),
            None => ffi::SQLITE_IOERR_CHECKRESERVEDLOCK,
        }
    }
}

unsafe extern "C" fn x_file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: pure forwarding to the open real file.
    unsafe {
        match rm(f).xFileControl {
            Some(m) => m(real(f), op, arg),
            None => ffi::SQLITE_NOTFOUND,
        }
    }
}

unsafe extern "C" fn x_sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: pure forwarding to the open real file.
    unsafe {
        match rm(f).xSectorSize {
            Some(m) => m(real(f)),
            None => 4096,
        }
    }
}

unsafe extern "C" fn x_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: pure forwarding to the open real file.
    unsafe {
        match rm(f).xDeviceCharacteristics {
            Some(m) => m(real(f)),
            None => 0,
        }
    }
}

unsafe extern "C" fn x_shm_map(
    f: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: only installed when the real method table has iVersion >= 2.
    unsafe {
        match rm(f).xShmMap {
            Some(m) => m(real(f), region, size, extend, out),
            None => ffi::SQLITE_IOERR_SHMMAP,
        }
    }
}

unsafe extern "C" fn x_shm_lock(
    f: *mut ffi::sqlite3_file,
    off: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: only installed when the real method table has iVersion >= 2.
    unsafe {
        match rm(f).xShmLock {
            Some(m) => m(real(f), off, n, flags),
            None => ffi::SQLITE_IOERR_SHMLOCK,
        }
    }
}

unsafe extern "C" fn x_shm_barrier(f: *mut ffi::sqlite3_file) {
    // SAFETY: only installed when the real method table has iVersion >= 2.
    unsafe {
        if let Some(m) = rm(f).xShmBarrier {
            m(real(f));
        }
    }
}

unsafe extern "C" fn x_shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: only installed when the real method table has iVersion >= 2.
    unsafe {
        match rm(f).xShmUnmap {
            Some(m) => m(real(f), delete),
            None => ffi::SQLITE_OK,
        }
    }
}

unsafe extern "C" fn x_fetch(
    f: *mut ffi::sqlite3_file,
    off: ffi::sqlite3_int64,
    amt: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: only installed when the real method table has iVersion >= 3.
    unsafe {
        match rm(f).xFetch {
            Some(m) => m(real(f), off, amt, out),
            None => {
                *out = ptr::null_mut();
                ffi::SQLITE_OK
            }
        }
    }
}

unsafe extern "C" fn x_unfetch(
    f: *mut ffi::sqlite3_file,
    off: ffi::sqlite3_int64,
    p: *mut c_void,
) -> c_int {
    // SAFETY: only installed when the real method table has iVersion >= 3.
    unsafe {
        match rm(f).xUnfetch {
            Some(m) => m(real(f), off, p),
            None => ffi::SQLITE_OK,
        }
    }
}

const fn methods(version: c_int) -> ffi::sqlite3_io_methods {
    ffi::sqlite3_io_methods {
        iVersion: version,
        xClose: Some(x_close),
        xRead: Some(x_read),
        xWrite: Some(x_write),
        xTruncate: Some(x_truncate),
        xSync: Some(x_sync),
        xFileSize: Some(x_file_size),
        xLock: Some(x_lock),
        xUnlock: Some(x_unlock),
        xCheckReservedLock: Some(x_check_reserved_lock),
        xFileControl: Some(x_file_control),
        xSectorSize: Some(x_sector_size),
        xDeviceCharacteristics: Some(x_device_characteristics),
        xShmMap: if version >= 2 { Some(x_shm_map) } else { None },
        xShmLock: if version >= 2 { Some(x_shm_lock) } else { None },
        xShmBarrier: if version >= 2 {
            Some(x_shm_barrier)
        } else {
            None
        },
        xShmUnmap: if version >= 2 {
            Some(x_shm_unmap)
        } else {
            None
        },
        xFetch: if version >= 3 { Some(x_fetch) } else { None },
        xUnfetch: if version >= 3 { Some(x_unfetch) } else { None },
    }
}

static METHODS_V1: ffi::sqlite3_io_methods = methods(1);
static METHODS_V2: ffi::sqlite3_io_methods = methods(2);
static METHODS_V3: ffi::sqlite3_io_methods = methods(3);

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn each_policy_selects_its_primitive_per_platform() {
        let custom = SyncPolicy::custom(|ctx| ctx.full_sync());
        let table = [
            (
                SyncPolicy::Full,
                Some(Primitive::FullFsync),
                Some(Primitive::Fsync),
            ),
            (
                SyncPolicy::Barrier,
                Some(Primitive::BarrierFsync),
                Some(Primitive::Fdatasync),
            ),
            (
                SyncPolicy::Normal,
                Some(Primitive::Fsync),
                Some(Primitive::Fsync),
            ),
            (SyncPolicy::Off, None, None),
            (custom, Some(Primitive::FullFsync), Some(Primitive::Fsync)),
        ];
        for (p, apple, other) in table {
            assert_eq!(select(&p, true), apple, "{p:?} on Apple");
            assert_eq!(select(&p, false), other, "{p:?} elsewhere");
        }
    }

    #[test]
    fn only_unsupported_falls_back_and_every_fallback_is_counted() {
        let f = tempfile::tempfile().unwrap();
        let fd = f.as_raw_fd();
        let counters = Counters::default();
        let answer = |errno: Option<i32>| {
            move |_: c_int, _: Primitive| match errno {
                None => Ok(()),
                Some(e) => Err(std::io::Error::from_raw_os_error(e)),
            }
        };
        fcntl_with_fallback(fd, Primitive::FullFsync, &answer(None), &counters).unwrap();
        assert_eq!(counters.snapshot().sync_fallbacks, 0);
        for errno in [libc::ENOTSUP, libc::EOPNOTSUPP, libc::EINVAL] {
            fcntl_with_fallback(fd, Primitive::BarrierFsync, &answer(Some(errno)), &counters)
                .unwrap();
        }
        assert_eq!(counters.snapshot().sync_fallbacks, 3);
        for errno in [libc::EIO, libc::ENOSPC, libc::EBADF] {
            let e = fcntl_with_fallback(fd, Primitive::FullFsync, &answer(Some(errno)), &counters)
                .unwrap_err();
            assert_eq!(e.raw_os_error(), Some(errno));
        }
        assert_eq!(counters.snapshot().sync_fallbacks, 3);
    }
}
