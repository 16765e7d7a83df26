//! Encryption at rest on real SQLCipher files (feature `encryption`): the key
//! errors leave every file as it was, nothing written is readable in any file on
//! disk, the plaintext header keeps the SQLite magic and survives suspend/resume,
//! and a store asks its key provider once however many connections it opens later.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use keel_storage::encryption::{key_connection, DataKey, KeyError, KeyFile, KeyPurpose};
use keel_storage::rotate::{Encryption, RotateOptions};
use keel_storage::{Error, Store, StoreOptions, SuspendOptions};

fn opts() -> StoreOptions {
    StoreOptions::default().readers(2)
}

fn fixed_key(byte: u8) -> impl Fn(&Path, KeyPurpose) -> Result<DataKey, KeyError> + Send + Sync {
    move |_: &Path, _| Ok(DataKey::from_parts(&[byte; 32], &[byte ^ 0x5a; 16]))
}

/// Every file in `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

/// The two snapshots hold the same files with the same bytes (named, not dumped,
/// when they differ).
fn assert_unchanged(before: &BTreeMap<PathBuf, Vec<u8>>, dir: &Path) {
    let after = snapshot(dir);
    let names = |m: &BTreeMap<PathBuf, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(before), names(&after), "the same files");
    for (p, b) in before {
        let a = &after[p];
        let first = a.iter().zip(b).position(|(x, y)| x != y);
        assert!(
            a.len() == b.len() && first.is_none(),
            "{} changed: {} -> {} bytes, first difference at {first:?}",
            p.display(),
            b.len(),
            a.len()
        );
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn write_kv(store: &Store, k: &str, v: &[u8]) {
    let (k, v) = (k.to_string(), v.to_vec());
    store
        .write_blocking(move |t| {
            t.execute_batch("CREATE TABLE IF NOT EXISTS kv(k TEXT PRIMARY KEY, v BLOB)")?;
            t.execute("INSERT OR REPLACE INTO kv VALUES (?1, ?2)", (k, v))?;
            Ok::<_, Error>(())
        })
        .unwrap();
}

fn read_kv(store: &Store, k: &str) -> Option<Vec<u8>> {
    let k = k.to_string();
    store
        .read(move |c| {
            let r = c.query_row("SELECT v FROM kv WHERE k = ?1", [k], |r| r.get(0));
            match r {
                Ok(v) => Ok(Some(v)),
                Err(keel_storage::rusqlite::Error::QueryReturnedNoRows) => Ok(None),
                Err(e) => Err(Error::Sqlite {
                    op: "test read",
                    path: PathBuf::new(),
                    source: Arc::new(e),
                }),
            }
        })
        .unwrap()
}

/// A live store's files copied as they are (the WAL included), as a crash or a
/// backup would leave them.
fn copy_live(from: &Path, to: &Path) {
    for suffix in ["", "-wal"] {
        let mut src = from.as_os_str().to_owned();
        src.push(suffix);
        let mut dst = to.as_os_str().to_owned();
        dst.push(suffix);
        std::fs::copy(&src, &dst).unwrap();
    }
}

#[test]
fn sqlcipher_is_linked_with_fts5() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("a.db"), opts().encryption(fixed_key(1))).unwrap();
    let version: String = store
        .read(|c| {
            c.query_row("PRAGMA cipher_version", [], |r| r.get(0))
                .map_err(|e| Error::Sqlite {
                    op: "cipher_version",
                    path: PathBuf::new(),
                    source: Arc::new(e),
                })
        })
        .unwrap();
    assert!(version.starts_with('4'), "SQLCipher 4.x, got {version}");
    store
        .write_blocking(|t| {
            t.execute_batch(
                "CREATE VIRTUAL TABLE doc USING fts5(body);
                 INSERT INTO doc VALUES ('the quick brown fox');",
            )?;
            Ok::<_, Error>(())
        })
        .unwrap();
    let hits: i64 = store
        .read(|c| {
            c.query_row(
                "SELECT count(*) FROM doc WHERE doc MATCH 'quick'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| Error::Sqlite {
                op: "fts5",
                path: PathBuf::new(),
                source: Arc::new(e),
            })
        })
        .unwrap();
    assert_eq!(hits, 1);
    store.close().unwrap();
}

#[test]
fn an_encrypted_store_reopens_with_its_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let key = dir.path().join("a.key");
    let store = Store::open(&db, opts().encryption(KeyFile::new(&key))).unwrap();
    write_kv(&store, "greeting", b"hello");
    store.close().unwrap();
    let bytes = std::fs::read(&db).unwrap();
    assert_ne!(
        &bytes[..16],
        b"SQLite format 3\0",
        "the header is encrypted"
    );
    let text = std::fs::read_to_string(&key).unwrap();
    assert_eq!(text.trim().len(), 96, "key and salt in hex");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let store = Store::open(&db, opts().encryption(KeyFile::new(&key))).unwrap();
    assert_eq!(read_kv(&store, "greeting").as_deref(), Some(&b"hello"[..]));
    store.close().unwrap();
}

/// Known strings in many rows and in a large blob (overflow pages), read back
/// through every file in the directory while the store is open (WAL full of
/// frames) and after it closed. The same run without a key finds them: the
/// check can see plaintext.
#[test]
fn nothing_written_is_readable_in_any_file() {
    let needle_text = "keel-secret-field-7f3a";
    let mut blob = Vec::new();
    while blob.len() < 3 << 20 {
        blob.extend_from_slice(b"keel-secret-blob-pattern-");
    }
    let needles: [&[u8]; 3] = [
        needle_text.as_bytes(),
        b"keel-secret-blob-pattern-",
        b"CREATE TABLE kv",
    ];
    for encrypted in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let mut o = opts().checkpoint_threshold(64 << 20);
        if encrypted {
            o = o.encryption(KeyFile::new(dir.path().join("keys").join("a.key")));
            std::fs::create_dir(dir.path().join("keys")).unwrap();
        }
        let store = Store::open(&db, o).unwrap();
        for i in 0..200 {
            write_kv(
                &store,
                &format!("row{i}"),
                format!("{needle_text}-{i}").as_bytes(),
            );
        }
        write_kv(&store, "big", &blob);
        let live = snapshot(dir.path());
        assert!(
            live.keys().any(|p| p.to_string_lossy().ends_with("-wal")),
            "the WAL is there while the store is open"
        );
        store.close().unwrap();
        let closed = snapshot(dir.path());
        let found: Vec<String> = live
            .iter()
            .chain(closed.iter())
            .flat_map(|(p, b)| {
                needles
                    .iter()
                    .filter(|n| contains(b, n))
                    .map(move |n| format!("{} in {}", String::from_utf8_lossy(n), p.display()))
            })
            .collect();
        if encrypted {
            assert!(found.is_empty(), "plaintext on disk: {found:?}");
        } else {
            assert!(
                found.len() >= needles.len(),
                "the plaintext control must find every string: {found:?}"
            );
        }
    }
}

/// A store with committed data in its WAL, as a crash leaves it (copied live).
fn encrypted_with_wal(dir: &Path, key: u8) -> PathBuf {
    let live = dir.join("live.db");
    let store = Store::open(&live, opts().encryption(fixed_key(key))).unwrap();
    write_kv(&store, "a", b"1");
    let db = dir.join("a.db");
    copy_live(&live, &db);
    store.close().unwrap();
    std::fs::remove_file(&live).unwrap();
    db
}

#[test]
fn a_wrong_key_is_wrong_key_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = encrypted_with_wal(dir.path(), 1);
    let before = snapshot(dir.path());
    assert!(before.keys().any(|p| p.to_string_lossy().ends_with("-wal")));
    for header in [false, true] {
        let o = opts()
            .encryption(fixed_key(2))
            .plaintext_header(header)
            .recover_corrupt(true);
        match Store::open(&db, o) {
            Err(e @ Error::WrongKey { .. }) => {
                assert!(!e.is_bad_file(), "never moved aside");
                assert!(!e.to_string().contains("not a database"), "{e}");
            }
            other => panic!("expected WrongKey, got {other:?}"),
        }
        assert_unchanged(&before, dir.path());
    }
    // The right key still opens everything.
    let store = Store::open(&db, opts().encryption(fixed_key(1))).unwrap();
    assert_eq!(read_kv(&store, "a").as_deref(), Some(&b"1"[..]));
    store.close().unwrap();
}

/// A store closed cleanly leaves no `-wal`: then the writer connection judges the
/// key (no separate check connection), and a wrong key still changes nothing and
/// creates neither a `-wal` nor a `-shm`, in either header layout.
#[test]
fn a_wrong_key_on_a_closed_file_is_wrong_key_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let store = Store::open(&db, opts().encryption(fixed_key(1))).unwrap();
    write_kv(&store, "a", b"1");
    store.close().unwrap();
    let before = snapshot(dir.path());
    assert_eq!(
        before.len(),
        1,
        "only the database file: {:?}",
        before.keys()
    );
    for header in [false, true] {
        let o = opts()
            .encryption(fixed_key(2))
            .plaintext_header(header)
            .recover_corrupt(true);
        match Store::open(&db, o) {
            Err(e @ Error::WrongKey { .. }) => assert!(!e.is_bad_file(), "never moved aside"),
            other => panic!("expected WrongKey, got {other:?}"),
        }
        assert_unchanged(&before, dir.path());
    }
    let store = Store::open(&db, opts().encryption(fixed_key(1))).unwrap();
    assert_eq!(read_kv(&store, "a").as_deref(), Some(&b"1"[..]));
    store.close().unwrap();
}

/// A backup restored without its key, or an app that forgot to pass one: opened
/// with no key at all, an encrypted file is `KeyRequired` (with the plaintext
/// header, or with its WAL beside it), never "not a database", and even with
/// `recover_corrupt` it is not moved aside for a fresh, empty database. Without
/// either, ciphertext cannot be told from noise: the file is `NotADatabase`, and
/// still unchanged.
#[test]
fn an_encrypted_file_opened_without_a_key_is_key_required_and_never_moved_aside() {
    for header in [false, true] {
        for with_wal in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let keyed = || opts().encryption(fixed_key(6)).plaintext_header(header);
            let live = dir.path().join("live.db");
            let store = Store::open(&live, keyed()).unwrap();
            write_kv(&store, "a", b"kept");
            let db = dir.path().join("a.db");
            if with_wal {
                copy_live(&live, &db);
                store.close().unwrap();
            } else {
                store.close().unwrap();
                std::fs::rename(&live, &db).unwrap();
            }
            let _ = std::fs::remove_file(&live);
            let before = snapshot(dir.path());
            if !header && !with_wal {
                match Store::open(&db, opts()) {
                    Err(Error::NotADatabase { .. }) => {}
                    other => panic!("a lone encrypted file: expected NotADatabase, got {other:?}"),
                }
                assert_unchanged(&before, dir.path());
                continue;
            }
            match Store::open(&db, opts().recover_corrupt(true)) {
                Err(e @ Error::KeyRequired { .. }) => {
                    assert!(!e.is_bad_file(), "never moved aside");
                    assert!(!e.to_string().contains("not a database"), "{e}");
                }
                other => {
                    panic!("header {header}, wal {with_wal}: expected KeyRequired, got {other:?}")
                }
            }
            assert_unchanged(&before, dir.path());
            let store = Store::open(&db, keyed()).unwrap();
            assert_eq!(read_kv(&store, "a").as_deref(), Some(&b"kept"[..]));
            store.close().unwrap();
        }
    }
}

/// A damaged plaintext file is still a bad file (moved aside with
/// `recover_corrupt`), not mistaken for an encrypted one.
#[test]
fn a_damaged_plaintext_file_is_not_taken_for_an_encrypted_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("text.db");
    let text: Vec<u8> = b"not a database, only some text that someone wrote here. "
        .iter()
        .copied()
        .cycle()
        .take(8192)
        .collect();
    std::fs::write(&db, &text).unwrap();
    match Store::open(&db, opts()) {
        Err(e @ Error::NotADatabase { .. }) => assert!(e.is_bad_file()),
        other => panic!("expected NotADatabase, got {other:?}"),
    }
}

#[test]
fn a_missing_key_file_is_key_lost_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = encrypted_with_wal(dir.path(), 3);
    let before = snapshot(dir.path());
    let key = dir.path().join("restored.key");
    let o = opts().encryption(KeyFile::new(&key)).recover_corrupt(true);
    match Store::open(&db, o) {
        Err(e @ Error::KeyLost { .. }) => assert!(!e.is_bad_file()),
        other => panic!("expected KeyLost, got {other:?}"),
    }
    assert!(
        !key.exists(),
        "no new key was made for an existing database"
    );
    assert_unchanged(&before, dir.path());
}

#[test]
fn an_unavailable_key_is_key_unavailable_and_creates_nothing() {
    let locked = |_: &Path, _| Err(KeyError::Unavailable("device locked".into()));
    let dir = tempfile::tempdir().unwrap();
    // A new database: no file appears.
    match Store::open(dir.path().join("new.db"), opts().encryption(locked)) {
        Err(Error::KeyUnavailable { detail, .. }) => assert_eq!(detail, "device locked"),
        other => panic!("expected KeyUnavailable, got {other:?}"),
    }
    assert!(snapshot(dir.path()).is_empty(), "nothing created");
    // An existing one: unchanged, and it opens once the key is back.
    let db = encrypted_with_wal(dir.path(), 4);
    let before = snapshot(dir.path());
    match Store::open(&db, opts().encryption(locked)) {
        Err(Error::KeyUnavailable { .. }) => {}
        other => panic!("expected KeyUnavailable, got {other:?}"),
    }
    assert_unchanged(&before, dir.path());
    let store = Store::open(&db, opts().encryption(fixed_key(4))).unwrap();
    assert_eq!(read_kv(&store, "a").as_deref(), Some(&b"1"[..]));
    store.close().unwrap();
}

#[test]
fn a_plaintext_file_opened_with_a_key_is_not_encrypted() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.db");
    let store = Store::open(&live, opts()).unwrap();
    write_kv(&store, "a", b"plain");
    let db = dir.path().join("a.db");
    copy_live(&live, &db);
    store.close().unwrap();
    std::fs::remove_file(&live).unwrap();
    let before = snapshot(dir.path());
    for header in [false, true] {
        let o = opts()
            .encryption(fixed_key(5))
            .plaintext_header(header)
            .recover_corrupt(true);
        match Store::open(&db, o) {
            Err(e @ Error::NotEncrypted { .. }) => assert!(!e.is_bad_file()),
            other => panic!("expected NotEncrypted, got {other:?}"),
        }
        assert_unchanged(&before, dir.path());
    }
    let store = Store::open(&db, opts()).unwrap();
    assert_eq!(read_kv(&store, "a").as_deref(), Some(&b"plain"[..]));
    store.close().unwrap();
}

/// The shared-container layout: the first 32 bytes stay plaintext (the magic and
/// SQLCipher's 80 reserved bytes per page say what the file is), the salt lives
/// with the key, and the store suspends and resumes (every connection closed and
/// reopened with the key it holds) and reopens.
#[test]
fn the_plaintext_header_survives_suspend_resume_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let key = dir.path().join("shared.key");
    let o = || opts().encryption(KeyFile::new(&key)).plaintext_header(true);
    let store = Store::open(&db, o()).unwrap();
    write_kv(&store, "before", b"suspend");
    store.suspend(SuspendOptions::default()).unwrap();
    let header = std::fs::read(&db).unwrap();
    assert_eq!(&header[..16], b"SQLite format 3\0");
    assert_eq!(header[20], 80, "SQLCipher's reserved bytes per page");
    assert!(!contains(&header, b"suspend"));
    store.resume().unwrap();
    write_kv(&store, "after", b"resume");
    assert_eq!(read_kv(&store, "before").as_deref(), Some(&b"suspend"[..]));
    store.close().unwrap();
    let store = Store::open(&db, o()).unwrap();
    assert_eq!(read_kv(&store, "after").as_deref(), Some(&b"resume"[..]));
    store.close().unwrap();
    // The other layout cannot read it.
    match Store::open(&db, opts().encryption(KeyFile::new(&key))) {
        Err(Error::WrongKey { .. }) => {}
        other => panic!("expected WrongKey, got {other:?}"),
    }
}

/// The provider is asked once per open: readers opened on demand, the writer and
/// checkpointer reopened after a resume all use the key the store holds, though
/// the provider has become unavailable (the device locked after the open).
#[test]
fn the_key_is_read_once_per_open() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let once = move |_: &Path, _| {
        if c.fetch_add(1, Ordering::SeqCst) == 0 {
            Ok(DataKey::from_parts(&[9; 32], &[8; 16]))
        } else {
            Err(KeyError::Unavailable("locked".into()))
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("a.db"), opts().readers(1).encryption(once)).unwrap();
    write_kv(&store, "a", b"1");
    for round in 0..3 {
        store.suspend(SuspendOptions::default()).unwrap();
        store.resume().unwrap();
        write_kv(&store, &format!("r{round}"), b"x");
        // Reads on several threads at once: the pool opens more connections.
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| assert_eq!(read_kv(&store, "a").as_deref(), Some(&b"1"[..])));
            }
        });
    }
    store.close().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn data_key_text_round_trips_and_never_prints() {
    let k = DataKey::generate().unwrap();
    let hex = k.to_hex();
    assert_eq!(hex.len(), 96);
    let back = DataKey::from_hex(&format!("  {}\n", hex.as_str())).unwrap();
    assert_eq!(back.to_hex().as_str(), hex.as_str());
    assert!(DataKey::from_hex(&hex[..64]).is_none());
    assert!(DataKey::from_hex(&"g".repeat(96)).is_none());
    assert_eq!(format!("{k:?}"), "DataKey(<redacted>)");
    assert_ne!(DataKey::generate().unwrap().to_hex().as_str(), hex.as_str());
}

/// Set in the child process of [`a_wrong_key_prints_nothing_on_stderr`]: the
/// directory it opens a file in with the wrong key.
const STDERR_CHILD: &str = "KEEL_TEST_STDERR_CHILD";

/// SQLCipher logs each page that fails its HMAC (`ERROR CORE …`) to stderr off
/// Apple and Android, and keel's key check fails pages on purpose: a service
/// whose stderr is its log would print lines about an error keel already
/// reports as `WrongKey`. Run in a child process of this test binary, since
/// only a process's own stderr shows what SQLCipher wrote.
#[test]
fn a_wrong_key_prints_nothing_on_stderr() {
    if let Some(dir) = std::env::var_os(STDERR_CHILD) {
        let db = encrypted_with_wal(Path::new(&dir), 1);
        for header in [false, true] {
            let o = opts().encryption(fixed_key(2)).plaintext_header(header);
            match Store::open(&db, o) {
                Err(Error::WrongKey { .. }) => println!("child: WrongKey"),
                other => panic!("expected WrongKey, got {other:?}"),
            }
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "a_wrong_key_prints_nothing_on_stderr",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(STDERR_CHILD, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert_eq!(
        stdout.matches("child: WrongKey").count(),
        2,
        "the child saw both wrong keys:\n{stdout}"
    );
    assert!(
        !stderr.contains("ERROR") && !stderr.contains("WARN"),
        "SQLCipher wrote to stderr:\n{stderr}"
    );
}

/// A file SQLCipher made with its own defaults (HMAC-SHA512 on every page, 80
/// reserved bytes), as keel made them before it chose HMAC-SHA256: `rows` rows in
/// `kv`, the last `in_wal` of them still in the WAL of a connection left open
/// (returned, to keep the WAL there).
fn sqlcipher_default_file(
    db: &Path,
    key: &DataKey,
    plaintext_header: bool,
    rows: usize,
    in_wal: usize,
) -> keel_storage::rusqlite::Connection {
    let c = keel_storage::rusqlite::Connection::open(db).unwrap();
    let mut keying = format!("PRAGMA key = \"x'{}'\";", key.to_hex().as_str());
    if plaintext_header {
        keying.push_str(" PRAGMA cipher_plaintext_header_size = 32;");
    }
    c.execute_batch(&keying).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; \
         CREATE TABLE kv(k TEXT PRIMARY KEY, v BLOB)",
    )
    .unwrap();
    for i in 0..rows {
        if i == rows - in_wal {
            c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        }
        c.execute(
            "INSERT INTO kv VALUES (?1, ?2)",
            (format!("k{i}"), vec![i as u8; 300]),
        )
        .unwrap();
    }
    c
}

/// Whether SQLCipher itself, keyed with `key` and SQLCipher's default settings
/// (or the page HMAC `mac`), reads the table `kv` of `db`.
fn sqlcipher_reads(db: &Path, key: &DataKey, plaintext_header: bool, mac: Option<&str>) -> bool {
    let c = keel_storage::rusqlite::Connection::open(db).unwrap();
    let mut keying = format!("PRAGMA key = \"x'{}'\";", key.to_hex().as_str());
    if plaintext_header {
        keying.push_str(" PRAGMA cipher_plaintext_header_size = 32;");
    }
    if let Some(mac) = mac {
        keying.push_str(&format!(" PRAGMA cipher_hmac_algorithm = {mac};"));
    }
    c.execute_batch(&keying).unwrap();
    c.query_row("SELECT count(*) FROM kv", [], |r| r.get::<_, i64>(0))
        .is_ok()
}

/// The files keel makes carry an HMAC-SHA256 on every page, not SQLCipher's
/// default HMAC-SHA512: SQLCipher reads them keyed with `HMAC_SHA256`, and not with
/// its defaults.
#[test]
fn new_files_carry_hmac_sha256() {
    for plaintext_header in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let key = DataKey::from_parts(&[4; 32], &[2; 16]);
        let k = key.clone();
        let store = Store::open(
            &db,
            opts()
                .encryption(move |_: &Path, _| Ok(k.clone()))
                .plaintext_header(plaintext_header),
        )
        .unwrap();
        write_kv(&store, "a", b"b");
        store.close().unwrap();
        assert!(!sqlcipher_reads(&db, &key, plaintext_header, None));
        assert!(sqlcipher_reads(
            &db,
            &key,
            plaintext_header,
            Some("HMAC_SHA256")
        ));
    }
}

/// Files made before keel chose HMAC-SHA256 keep SQLCipher's default, HMAC-SHA512:
/// they open with their key in both layouts, from the file alone or with pages in
/// a WAL beside it, and keep their format; a wrong key is still `WrongKey` and
/// changes nothing.
#[test]
fn files_with_sqlciphers_default_hmac_open_and_keep_it() {
    for plaintext_header in [false, true] {
        for in_wal in [0, 5] {
            let dir = tempfile::tempdir().unwrap();
            let made = dir.path().join("made.db");
            let db = dir.path().join("a.db");
            let key = DataKey::from_parts(&[7; 32], &[9; 16]);
            let maker = sqlcipher_default_file(&made, &key, plaintext_header, 40, in_wal);
            if in_wal > 0 {
                copy_live(&made, &db);
            } else {
                drop(maker);
                std::fs::copy(&made, &db).unwrap();
            }
            let case = format!("plaintext header {plaintext_header}, {in_wal} rows in the WAL");
            let before = snapshot(dir.path());
            let wrong = opts()
                .encryption(fixed_key(3))
                .plaintext_header(plaintext_header);
            match Store::open(&db, wrong) {
                Err(Error::WrongKey { .. }) => {}
                other => panic!("{case}: expected WrongKey, got {other:?}"),
            }
            assert_unchanged(&before, dir.path());

            let k = key.clone();
            let o = move || {
                let k = k.clone();
                opts()
                    .encryption(move |_: &Path, _| Ok(k.clone()))
                    .plaintext_header(plaintext_header)
            };
            let store = Store::open(&db, o()).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(read_kv(&store, "k39"), Some(vec![39; 300]), "{case}");
            write_kv(&store, "later", b"written by keel");
            store.close().unwrap();
            let store = Store::open(&db, o()).unwrap();
            assert_eq!(read_kv(&store, "k0"), Some(vec![0; 300]), "{case}");
            assert_eq!(
                read_kv(&store, "later").as_deref(),
                Some(&b"written by keel"[..]),
                "{case}"
            );
            store.close().unwrap();
            // A tool's connection, keyed as keel keys its own, reads it too.
            let c = keel_storage::rusqlite::Connection::open(&db).unwrap();
            key_connection(&c, &key, plaintext_header).unwrap();
            let n: i64 = c
                .query_row("SELECT count(*) FROM kv", [], |r| r.get(0))
                .unwrap();
            assert_eq!(n, 41, "{case}");
            drop(c);
            assert!(
                sqlcipher_reads(&db, &key, plaintext_header, None),
                "{case}: still SQLCipher's default"
            );
        }
    }
}

/// Rotating the key of a file with SQLCipher's default HMAC copies it into a file
/// with keel's, HMAC-SHA256, which opens under the new key with every row.
#[test]
fn a_rotation_moves_an_old_file_to_hmac_sha256() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let old = DataKey::from_parts(&[7; 32], &[9; 16]);
    drop(sqlcipher_default_file(&db, &old, true, 40, 0));
    let store = Store::open(
        &db,
        opts()
            .encryption(move |_: &Path, _| Ok(old.clone()))
            .plaintext_header(true),
    )
    .unwrap();
    let new_key = dir.path().join("new.key");
    store
        .rotate_key(
            Some(Encryption::new(KeyFile::new(&new_key)).plaintext_header(true)),
            RotateOptions::default(),
        )
        .wait()
        .unwrap();
    assert_eq!(read_kv(&store, "k20"), Some(vec![20; 300]));
    store.close().unwrap();
    let new = DataKey::from_hex(&std::fs::read_to_string(&new_key).unwrap()).unwrap();
    assert!(!sqlcipher_reads(&db, &new, true, None), "no longer SHA-512");
    assert!(sqlcipher_reads(&db, &new, true, Some("HMAC_SHA256")));
    let store = Store::open(
        &db,
        opts()
            .encryption(KeyFile::new(&new_key))
            .plaintext_header(true),
    )
    .unwrap();
    assert_eq!(read_kv(&store, "k39"), Some(vec![39; 300]));
    store.close().unwrap();
}
