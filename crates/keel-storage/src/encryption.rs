//! Encryption at rest: the key a store is opened with, where it comes from, and how
//! every connection gets it.
//!
//! With the cargo feature `encryption`, keel links SQLCipher instead of plain SQLite.
//! SQLCipher encrypts each page as the pager writes it (AES-256, with an HMAC per
//! page), so everything in the file is encrypted: tables, indexes, the full-text and
//! vector side tables, the change log, the dictionary, and every WAL frame. keel's
//! VFS shim sits below the pager and sees only encrypted pages; it syncs, counts and
//! simulates them as before.
//!
//! A store is encrypted when its options carry a [`KeyProvider`]
//! ([`StoreOptions::encryption`](crate::options::StoreOptions::encryption)). The key
//! is a [`DataKey`]: 32 random bytes that SQLCipher uses directly as its AES key, and
//! 16 random bytes of salt (SQLCipher derives the HMAC key from them). No password
//! derivation runs on open. The open asks the provider once and keeps the key for
//! the life of the store, so a connection opened later (a reader, the checkpointer,
//! the writer after a resume) never needs the provider again. The key is zeroed when
//! the store's last handle closes.
//!
//! The provider says why it has no key, and keel turns that into a typed error that
//! leaves the files as they were:
//!
//! * [`KeyError::Unavailable`] → [`Error::KeyUnavailable`]: the key exists but cannot be
//!   read now (a locked device). Retry later; keel never makes a new key for an
//!   existing database.
//! * [`KeyError::Lost`] → [`Error::KeyLost`]: the database exists but its key does not
//!   (a backup restored without its key). keel refuses, and never creates a fresh,
//!   empty database over the old one.
//!
//! keel itself detects the three other cases: a file that does not decrypt with the
//! key ([`Error::WrongKey`]), a plaintext SQLite file opened with a key
//! ([`Error::NotEncrypted`]) and an encrypted file opened with none
//! ([`Error::KeyRequired`], judged from the first page before SQLite reads it).
//!
//! With the **plaintext header** ([`StoreOptions::plaintext_header`](crate::options::StoreOptions::plaintext_header)),
//! the first 32 bytes of the file stay plaintext: the SQLite magic, the page size and
//! the fields iOS reads to recognise an SQLite file in WAL mode, which it needs so
//! that a file in a shared container does not get a suspended app killed (0xdead10cc).
//! The salt then cannot live in the file's first 16 bytes; it lives in the
//! [`DataKey`], beside the key, which is why the key carries it always.
//!
//! [`Error::KeyUnavailable`]: crate::error::Error::KeyUnavailable
//! [`Error::KeyLost`]: crate::error::Error::KeyLost
//! [`Error::WrongKey`]: crate::error::Error::WrongKey
//! [`Error::NotEncrypted`]: crate::error::Error::NotEncrypted
//! [`Error::KeyRequired`]: crate::error::Error::KeyRequired

// Without the feature the items these docs describe are compiled out, and their
// links with them; the docs stay, since they say what the feature gives.
#![cfg_attr(
    not(feature = "encryption-api"),
    allow(rustdoc::broken_intra_doc_links)
)]

#[cfg(feature = "encryption-api")]
pub use enabled::*;

use std::io::Read;
use std::path::Path;

/// Whether the file at `path`, whose header is not a plain SQLite header, is an
/// SQLCipher file: then it needs its key, and it is not a bad file to be moved
/// aside. Decided from its first page, in either layout:
///
/// * with the plaintext header, the SQLite magic stays and header byte 20 (the
///   bytes reserved at the end of each page) is SQLCipher's 80, where a
///   plaintext file has 0;
/// * without it, the file starts with its salt and the rest of the 4 KiB page is
///   ciphertext: each 512-byte sector of it holds about 221 distinct byte values.
///   Page 1 of a plaintext file (the schema's b-tree page: zeros, small integers,
///   SQL text) holds far fewer, and so does text garbage; a disk that tears a
///   write leaves old or new sectors, not noise over the whole page.
///
/// Compiled without the feature too, so such a build says what the file is.
pub(crate) fn looks_encrypted(path: &Path) -> bool {
    const MAGIC: &[u8; 16] = b"SQLite format 3\0";
    const PAGE: usize = 4096;
    const SECTOR: usize = 512;
    let mut page = [0u8; PAGE];
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut n = 0;
    while n < page.len() {
        match f.read(&mut page[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    if n >= 32 && &page[..16] == MAGIC {
        return is_sqlcipher_reserve(page[20]);
    }
    n == PAGE
        && page[SECTOR..].chunks(SECTOR).all(|sector| {
            let mut seen = [false; 256];
            for &b in sector {
                seen[usize::from(b)] = true;
            }
            seen.iter().filter(|&&s| s).count() >= 160
        })
}

/// Whether `byte20`, header byte 20 (the bytes reserved at the end of every page),
/// is what SQLCipher 4 reserves for a page's IV and HMAC: 80, whichever page HMAC
/// the file has (SQLite never shrinks a reserve once the key has set it, so a file
/// with HMAC-SHA256 keeps SQLCipher's default 80 and uses the last 48 of them). A
/// plaintext file reserves 0.
pub(crate) fn is_sqlcipher_reserve(byte20: u8) -> bool {
    byte20 == 80
}

#[cfg(not(feature = "encryption-api"))]
pub(crate) use disabled::Cipher;

/// Without the feature no store can be encrypted: `Cipher` has no value, so the
/// open pipeline's `Option<Arc<Cipher>>` is always `None` and costs nothing.
#[cfg(not(feature = "encryption-api"))]
mod disabled {
    use std::path::Path;

    use crate::error::Result;

    /// The key a store holds (none without the `encryption` feature).
    pub(crate) enum Cipher {}

    impl Cipher {
        pub(crate) fn apply(&self, _: &rusqlite::Connection) -> rusqlite::Result<()> {
            match *self {}
        }

        pub(crate) fn check_header(&self, _: &Path, _: &[u8]) -> Result<()> {
            match *self {}
        }

        pub(crate) fn authenticates_page1(&self, _: &[u8]) -> bool {
            match *self {}
        }

        pub(crate) fn learn_page_mac(&self, _: &Path) -> bool {
            match *self {}
        }
    }
}

#[cfg(feature = "encryption-api")]
mod enabled {
    use std::fmt;
    use std::io::{Read, Write};
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    use hmac::{Hmac, KeyInit, Mac};
    use sha2::{Sha256, Sha512};
    use zeroize::Zeroizing;

    use super::is_sqlcipher_reserve;
    use crate::error::{Error, Result};
    use crate::paths::wal_path;

    /// Bytes of the AES key in a [`DataKey`].
    pub const KEY_BYTES: usize = 32;
    /// Bytes of the salt in a [`DataKey`].
    pub const SALT_BYTES: usize = 16;
    const DATA_KEY_BYTES: usize = KEY_BYTES + SALT_BYTES;
    /// SQLCipher's plaintext header: the SQLite magic and the page-size and
    /// version fields that iOS reads.
    const PLAINTEXT_HEADER_BYTES: usize = 32;
    const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

    /// The HMAC SQLCipher puts on every page, after the page's IV, at the page's
    /// end.
    ///
    /// Files keel makes use HMAC-SHA256: the last 48 bytes, and about half the
    /// cost of SHA-512 on each page written or read, on CPUs with SHA
    /// instructions (x86-64 for years, ARMv8 with its crypto extensions). Files
    /// keel made before use SQLCipher 4's default, HMAC-SHA512 (80 bytes), and
    /// keep it until their key is rotated, which copies them into a new file. A
    /// store reads which one a file has from its pages, once, before its first
    /// connection is keyed.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum PageMac {
        /// HMAC-SHA256, 32-byte tags: every file keel makes.
        Sha256,
        /// HMAC-SHA512, 64-byte tags: files made before keel chose SHA-256.
        Sha512,
    }

    impl PageMac {
        /// Bytes of the IV before the tag.
        const IV_BYTES: usize = 16;

        fn tag_bytes(self) -> usize {
            match self {
                PageMac::Sha256 => 32,
                PageMac::Sha512 => 64,
            }
        }

        /// The bytes at the end of every page that SQLCipher's codec keeps for
        /// the IV and the tag. The file's header byte 20 says 80 either way
        /// ([`is_sqlcipher_reserve`]); with SHA-256 the 32 bytes before these
        /// are encrypted padding.
        pub(crate) fn reserve(self) -> usize {
            Self::IV_BYTES + self.tag_bytes()
        }

        /// SQLCipher's name of the algorithm (`PRAGMA cipher_hmac_algorithm`).
        pub(crate) fn pragma_name(self) -> &'static str {
            match self {
                PageMac::Sha256 => "HMAC_SHA256",
                PageMac::Sha512 => "HMAC_SHA512",
            }
        }
    }

    /// A database's data key: 32 random bytes used as SQLCipher's raw AES key and 16
    /// random bytes of salt. Zeroed when dropped; `Debug` never shows it.
    #[derive(Clone)]
    pub struct DataKey {
        bytes: Zeroizing<[u8; DATA_KEY_BYTES]>,
    }

    impl DataKey {
        /// A new random key and salt from the operating system's generator.
        pub fn generate() -> std::io::Result<DataKey> {
            let mut bytes = Zeroizing::new([0u8; DATA_KEY_BYTES]);
            getrandom::fill(&mut bytes[..]).map_err(std::io::Error::other)?;
            Ok(DataKey { bytes })
        }

        /// A key from its parts.
        pub fn from_parts(key: &[u8; KEY_BYTES], salt: &[u8; SALT_BYTES]) -> DataKey {
            let mut bytes = Zeroizing::new([0u8; DATA_KEY_BYTES]);
            bytes[..KEY_BYTES].copy_from_slice(key);
            bytes[KEY_BYTES..].copy_from_slice(salt);
            DataKey { bytes }
        }

        /// Parse the text form ([`DataKey::to_hex`]): 96 hex digits, key then salt;
        /// surrounding whitespace is ignored. `None` for anything else.
        pub fn from_hex(text: &str) -> Option<DataKey> {
            let text = text.trim().as_bytes();
            if text.len() != DATA_KEY_BYTES * 2 {
                return None;
            }
            let mut bytes = Zeroizing::new([0u8; DATA_KEY_BYTES]);
            for (i, pair) in text.chunks_exact(2).enumerate() {
                let hi = hex_value(pair[0])?;
                let lo = hex_value(pair[1])?;
                bytes[i] = hi << 4 | lo;
            }
            Some(DataKey { bytes })
        }

        /// The salt: not secret (SQLCipher keeps it in the file's first bytes
        /// without the plaintext header), so it names the key in the rotation
        /// journal without revealing it (`rotate::KeyId`).
        pub fn salt(&self) -> [u8; SALT_BYTES] {
            let mut s = [0u8; SALT_BYTES];
            s.copy_from_slice(&self.bytes[KEY_BYTES..]);
            s
        }

        /// The AES key's 32 bytes.
        fn aes_key(&self) -> &[u8] {
            &self.bytes[..KEY_BYTES]
        }

        /// The text form: 96 lowercase hex digits, key then salt (zeroed on drop).
        pub fn to_hex(&self) -> Zeroizing<String> {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            let mut s = Zeroizing::new(String::with_capacity(DATA_KEY_BYTES * 2));
            for b in self.bytes.iter() {
                s.push(char::from(DIGITS[usize::from(b >> 4)]));
                s.push(char::from(DIGITS[usize::from(b & 15)]));
            }
            s
        }
    }

    fn hex_value(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }

    impl fmt::Debug for DataKey {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("DataKey(<redacted>)")
        }
    }

    /// Why the open asks for a key.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum KeyPurpose {
        /// The database exists: return its key, or say why not. Never make a new
        /// one: a new key opens nothing that is already there.
        Open,
        /// The database does not exist yet: return its key, making (and durably
        /// storing) a new one if there is none. The store writes nothing before the
        /// provider returned, so a crash never leaves data under a key that was not
        /// kept.
        Create,
    }

    /// Why a [`KeyProvider`] has no key; each becomes its own [`Error`].
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum KeyError {
        /// The key exists but cannot be read now (the device is locked, the key
        /// store is not ready): retry later. Becomes [`Error::KeyUnavailable`].
        Unavailable(String),
        /// There is no usable key for an existing database (a backup restored
        /// without its key, a damaged key store): its data cannot be read.
        /// Becomes [`Error::KeyLost`].
        Lost(String),
    }

    /// Where a store's [`DataKey`] comes from: the platform's key store (Keychain,
    /// Android Keystore), a key file, the environment. Called once per open, on the
    /// open thread.
    pub trait KeyProvider: Send + Sync {
        /// The data key of the database at `database`.
        fn data_key(&self, database: &Path, purpose: KeyPurpose) -> Result<DataKey, KeyError>;
    }

    impl<F> KeyProvider for F
    where
        F: Fn(&Path, KeyPurpose) -> Result<DataKey, KeyError> + Send + Sync,
    {
        fn data_key(&self, database: &Path, purpose: KeyPurpose) -> Result<DataKey, KeyError> {
            self(database, purpose)
        }
    }

    /// A key kept in a file of its own ([`DataKey::to_hex`], mode 0600), for Rust
    /// services, tools and tests. For a new database without the file, a new key
    /// is written (to a temporary file, synced, renamed into place, the directory
    /// synced) before the database is created. Keep the file apart from the
    /// database's backups: a backup that carries its key is not encrypted.
    #[derive(Debug, Clone)]
    pub struct KeyFile {
        path: PathBuf,
    }

    impl KeyFile {
        /// The key kept at `path`.
        pub fn new(path: impl Into<PathBuf>) -> KeyFile {
            KeyFile { path: path.into() }
        }

        /// Read the key; `Ok(None)` when the file does not exist.
        pub fn read(&self) -> Result<Option<DataKey>, KeyError> {
            match std::fs::read(&self.path) {
                Ok(bytes) => {
                    let text = Zeroizing::new(bytes);
                    let key = std::str::from_utf8(&text).ok().and_then(DataKey::from_hex);
                    match key {
                        Some(k) => Ok(Some(k)),
                        None => Err(KeyError::Lost(format!(
                            "{} does not hold a keel data key (96 hex digits)",
                            self.path.display()
                        ))),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(KeyError::Unavailable(format!(
                    "cannot read {}: {e}",
                    self.path.display()
                ))),
            }
        }

        /// Store `key` durably at the file's path (refusing to replace a file
        /// already there).
        pub fn write_new(&self, key: &DataKey) -> std::io::Result<()> {
            let dir = match self.path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let mut tmp = self.path.as_os_str().to_owned();
            tmp.push(".tmp");
            let tmp = PathBuf::from(tmp);
            let mut o = std::fs::OpenOptions::new();
            o.write(true).create(true).truncate(true);
            std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
            let mut f = o.open(&tmp)?;
            f.write_all(key.to_hex().as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            drop(f);
            // A hard link refuses to replace an existing file, unlike rename.
            std::fs::hard_link(&tmp, &self.path)?;
            std::fs::remove_file(&tmp)?;
            std::fs::File::open(&dir)?.sync_all()
        }
    }

    impl KeyProvider for KeyFile {
        fn data_key(&self, _: &Path, purpose: KeyPurpose) -> Result<DataKey, KeyError> {
            match (self.read()?, purpose) {
                (Some(k), _) => Ok(k),
                (None, KeyPurpose::Open) => Err(KeyError::Lost(format!(
                    "the database exists but its key file {} does not",
                    self.path.display()
                ))),
                (None, KeyPurpose::Create) => {
                    let key = DataKey::generate().map_err(|e| {
                        KeyError::Unavailable(format!("no random bytes for a new key: {e}"))
                    })?;
                    self.write_new(&key).map_err(|e| {
                        KeyError::Unavailable(format!(
                            "cannot store a new key at {}: {e}",
                            self.path.display()
                        ))
                    })?;
                    // Another opener may have stored its key first: use the one
                    // that is on disk.
                    self.read()?.ok_or_else(|| {
                        KeyError::Unavailable(format!("{} vanished", self.path.display()))
                    })
                }
            }
        }
    }

    /// A key given in an environment variable ([`DataKey::to_hex`]), for services
    /// whose key arrives from a secret store. It never makes a key: an unset
    /// variable is [`KeyError::Unavailable`].
    #[derive(Debug, Clone)]
    pub struct KeyEnv {
        var: String,
    }

    impl KeyEnv {
        /// The key in the environment variable `var`.
        pub fn new(var: impl Into<String>) -> KeyEnv {
            KeyEnv { var: var.into() }
        }
    }

    impl KeyProvider for KeyEnv {
        fn data_key(&self, _: &Path, _: KeyPurpose) -> Result<DataKey, KeyError> {
            let Some(value) = std::env::var_os(&self.var) else {
                return Err(KeyError::Unavailable(format!("{} is not set", self.var)));
            };
            let text = Zeroizing::new(value.to_string_lossy().into_owned());
            DataKey::from_hex(&text).ok_or_else(|| {
                KeyError::Lost(format!(
                    "{} does not hold a keel data key (96 hex digits)",
                    self.var
                ))
            })
        }
    }

    /// Key a connection keel does not manage (a tool's read-only one) with `key`
    /// and header layout: the same statements every store connection starts with.
    pub fn key_connection(
        conn: &rusqlite::Connection,
        key: &DataKey,
        plaintext_header: bool,
    ) -> rusqlite::Result<()> {
        Cipher::new(key.clone(), plaintext_header).apply(conn)
    }

    /// Turn SQLCipher's own log off, once per process, on the first connection
    /// keel keys.
    ///
    /// SQLCipher (4.6 and later) logs warnings and errors by default: to the
    /// device log on Apple platforms and Android, and to the process's stderr
    /// everywhere else. It logs every page that fails its HMAC (`ERROR CORE
    /// sqlcipher_page_cipher: hmac check failed …`), and keel fails pages on
    /// purpose: the key check at open reads page 1 with a key that may be wrong,
    /// and tells a torn page from a wrong key with `cipher_integrity_check`. Each
    /// such case reaches the caller as a typed error (`WrongKey`, or an open that
    /// succeeds), so the lines only put noise into a service's stderr, which is
    /// often its log. The setting is SQLCipher's, for the whole process
    /// (`PRAGMA cipher_log = off`: no log target; the level stays as it was), so
    /// an app that wants SQLCipher's log back runs `PRAGMA cipher_log = stderr`
    /// (or a file path) on any connection once keel has opened one. The device
    /// logs of Apple platforms and Android are left as SQLCipher sets them.
    fn quiet_sqlcipher_log(conn: &rusqlite::Connection) {
        #[cfg(not(any(target_vendor = "apple", target_os = "android")))]
        {
            static QUIET: std::sync::Once = std::sync::Once::new();
            QUIET.call_once(|| {
                // A build without SQLCipher's log (`SQLCIPHER_OMIT_LOG`) answers
                // with an error status: nothing to turn off then.
                if let Err(e) = conn.execute_batch("PRAGMA cipher_log = off") {
                    tracing::debug!(error = %e, "could not turn SQLCipher's log off");
                }
            });
        }
        #[cfg(any(target_vendor = "apple", target_os = "android"))]
        let _ = conn;
    }

    /// Wait until SQLCipher has finished starting, in this process, before a
    /// connection is keyed.
    ///
    /// SQLite marks itself initialized before it runs SQLCipher's part of its
    /// initialization (`SQLITE_EXTRA_INIT`), and runs that part outside its own
    /// lock. A thread that opens a connection in that window is told SQLite is
    /// ready, and its `PRAGMA key` fails with SQLCipher's generic key error,
    /// while the first thread is still setting SQLCipher up. SQLCipher's start
    /// is idempotent and takes its own lock for the whole of its work, so calling
    /// it here either does the work or waits for the thread doing it.
    #[allow(unsafe_code)]
    fn sqlcipher_started() -> rusqlite::Result<()> {
        extern "C" {
            // Built into every bundled SQLCipher: libsqlite3-sys compiles it
            // with `-DSQLITE_EXTRA_INIT=sqlcipher_extra_init`.
            fn sqlcipher_extra_init(arg: *const std::ffi::c_char) -> std::ffi::c_int;
        }
        // SAFETY: `sqlite3_initialize` may be called at any time from any thread;
        // SQLCipher's start takes SQLite's main static mutex (which exists once
        // `sqlite3_initialize` has succeeded), returns at once when it already
        // ran, and ignores its argument.
        let rc = unsafe {
            match rusqlite::ffi::sqlite3_initialize() {
                rusqlite::ffi::SQLITE_OK => sqlcipher_extra_init(std::ptr::null()),
                rc => rc,
            }
        };
        if rc == rusqlite::ffi::SQLITE_OK {
            return Ok(());
        }
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            Some("SQLCipher could not start (its crypto provider or memory)".into()),
        ))
    }

    /// SQLCipher's page size, which keel keeps (`cipher_page_size`).
    const PAGE_BYTES: usize = 4096;

    /// PBKDF2 with HMAC-SHA512 (RFC 8018), the first 32 bytes of its first
    /// block: all a 32-byte key needs.
    fn pbkdf2_sha512(password: &[u8], salt: &[u8], iterations: u32) -> Zeroizing<[u8; KEY_BYTES]> {
        let mut out = Zeroizing::new([0u8; KEY_BYTES]);
        let Ok(prf) = <Hmac<Sha512> as KeyInit>::new_from_slice(password) else {
            return out;
        };
        let mut first = prf.clone();
        first.update(salt);
        first.update(&1u32.to_be_bytes());
        let mut u = Zeroizing::new([0u8; 64]);
        u.copy_from_slice(&first.finalize().into_bytes());
        let mut t = u.clone();
        for _ in 1..iterations {
            let mut next = prf.clone();
            next.update(&u[..]);
            u.copy_from_slice(&next.finalize().into_bytes());
            for (a, b) in t.iter_mut().zip(u.iter()) {
                *a ^= b;
            }
        }
        out.copy_from_slice(&t[..KEY_BYTES]);
        out
    }

    /// Whether `tag` is the HMAC (algorithm `M`, under `key`) of `covered`
    /// followed by page number `pgno`, little-endian: SQLCipher's page HMAC.
    fn verify<M: Mac + KeyInit>(key: &[u8], covered: &[u8], pgno: u32, tag: &[u8]) -> bool {
        let Ok(mut mac) = <M as KeyInit>::new_from_slice(key) else {
            return false;
        };
        mac.update(covered);
        mac.update(&pgno.to_le_bytes());
        mac.verify_slice(tag).is_ok()
    }

    /// What an encrypted store holds for the life of its handle: the key and the
    /// header layout, applied to every connection it opens.
    pub(crate) struct Cipher {
        key: DataKey,
        plaintext_header: bool,
        /// The file's page HMAC, read from it at the first [`Cipher::apply`].
        mac: OnceLock<PageMac>,
    }

    impl Cipher {
        /// A key and header layout known already (a rotation's two sides).
        pub(crate) fn new(key: DataKey, plaintext_header: bool) -> Cipher {
            Cipher {
                key,
                plaintext_header,
                mac: OnceLock::new(),
            }
        }

        /// Whether `page`, the first page of a file, carries the HMAC this key
        /// gives it (with either page HMAC): SQLCipher 4's own check of a page it
        /// reads, made here without opening a connection (the open's key check
        /// then costs no connection and no schema parse). `true` proves the key
        /// right: a wrong key cannot make an HMAC match. `false` proves nothing
        /// (a torn page, a short file, other cipher settings): the open then asks
        /// SQLCipher, which tells a wrong key from damage.
        ///
        /// `page` is the first page of the file this cipher keys: when it
        /// authenticates, its HMAC is remembered as the file's, so the first
        /// connection need not read the page again.
        pub(crate) fn authenticates_page1(&self, page: &[u8]) -> bool {
            match self.page_mac_of(page, 1) {
                Some(mac) => {
                    let _ = self.mac.set(mac);
                    true
                }
                None => false,
            }
        }

        /// Which page HMAC, if any, authenticates `page` as page number `pgno`
        /// under this key.
        ///
        /// SQLCipher 4's layout, which keel keeps: 4,096-byte pages whose last
        /// [`PageMac::reserve`] bytes hold the page's IV (16) and HMAC; the HMAC
        /// key is PBKDF2-HMAC-SHA512 of the AES key, salted with the salt XOR
        /// 0x3a, two iterations (whatever the page HMAC); a page's HMAC covers
        /// its ciphertext and IV, then its number (little-endian). Page 1's first
        /// 16 bytes (the salt) or 32 (the plaintext header) are outside it.
        fn page_mac_of(&self, page: &[u8], pgno: u32) -> Option<PageMac> {
            const SALT_MASK: u8 = 0x3a;
            const KDF_ITERATIONS: u32 = 2;
            let page = page.get(..PAGE_BYTES)?;
            let skipped = match (pgno, self.plaintext_header) {
                (1, true) => PLAINTEXT_HEADER_BYTES,
                (1, false) => SALT_BYTES,
                _ => 0,
            };
            let input = &page[skipped..];
            let mut salt = self.key.salt();
            for b in &mut salt {
                *b ^= SALT_MASK;
            }
            let mac_key = pbkdf2_sha512(self.key.aes_key(), &salt, KDF_ITERATIONS);
            [PageMac::Sha256, PageMac::Sha512].into_iter().find(|&mac| {
                let covered = input.len() - mac.reserve() + PageMac::IV_BYTES;
                let (covered, tag) = (
                    &input[..covered],
                    &input[covered..covered + mac.tag_bytes()],
                );
                match mac {
                    PageMac::Sha256 => verify::<Hmac<Sha256>>(&mac_key[..], covered, pgno, tag),
                    PageMac::Sha512 => verify::<Hmac<Sha512>>(&mac_key[..], covered, pgno, tag),
                }
            })
        }

        /// The page HMAC of the database at `path`: the first page that
        /// authenticates under this key, among the file's first pages, then its
        /// WAL's first frames (a file whose pages are still in the WAL only, or
        /// torn by a power loss in a checkpoint). `None` when none does: a wrong
        /// key, a new empty file, or no SQLCipher file at all. A right key
        /// authenticates every page written whole, and a power loss tears only
        /// the pages being written, whose WAL frames are whole.
        fn page_mac_of_file(&self, path: &Path) -> Option<PageMac> {
            const WAL_HEADER: u64 = 32;
            const FRAME_HEADER: usize = 24;
            // Read only on a wrong key's path; a right key stops at the first.
            const PAGES_READ: u64 = 256;
            let mut page = vec![0u8; PAGE_BYTES];
            if let Ok(f) = std::fs::File::open(path) {
                let mut f = f.take(PAGES_READ * PAGE_BYTES as u64);
                let mut pgno = 1;
                while f.read_exact(&mut page).is_ok() {
                    if let Some(mac) = self.page_mac_of(&page, pgno) {
                        return Some(mac);
                    }
                    pgno += 1;
                }
            }
            let f = std::fs::File::open(wal_path(path)).ok()?;
            let mut f = std::io::BufReader::new(
                f.take(WAL_HEADER + PAGES_READ * (FRAME_HEADER + PAGE_BYTES) as u64),
            );
            let mut header = [0u8; WAL_HEADER as usize];
            f.read_exact(&mut header).ok()?;
            let mut frame = vec![0u8; FRAME_HEADER + PAGE_BYTES];
            while f.read_exact(&mut frame).is_ok() {
                let pgno = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                if let Some(mac) = self.page_mac_of(&frame[FRAME_HEADER..], pgno) {
                    return Some(mac);
                }
            }
            None
        }

        /// Learns the page HMAC of the database at `path` from its pages (see
        /// [`Cipher::page_mac_of_file`]); whether any page authenticated under
        /// this key, which proves the key right.
        pub(crate) fn learn_page_mac(&self, path: &Path) -> bool {
            match self.mac.get() {
                Some(_) => true,
                None => match self.page_mac_of_file(path) {
                    Some(mac) => {
                        let _ = self.mac.set(mac);
                        true
                    }
                    None => false,
                },
            }
        }

        /// The page HMAC of the file `conn` has open, read once. A file none of
        /// whose pages authenticates (new and empty, or the key is wrong, which
        /// SQLCipher then refuses) gets the one of new files.
        fn page_mac(&self, conn: &rusqlite::Connection) -> PageMac {
            *self.mac.get_or_init(|| match conn.path() {
                Some(path) if !path.is_empty() => self
                    .page_mac_of_file(Path::new(path))
                    .unwrap_or(PageMac::Sha256),
                _ => PageMac::Sha256,
            })
        }

        /// The data key.
        pub(crate) fn key(&self) -> &DataKey {
            &self.key
        }

        /// Whether the first 32 bytes stay plaintext.
        pub(crate) fn plaintext_header(&self) -> bool {
            self.plaintext_header
        }

        /// SQLCipher's raw key-and-salt literal, `x'<96 hex>'`: what `ATTACH ... KEY`
        /// takes (zeroed on drop).
        pub(crate) fn raw_key_literal(&self) -> Zeroizing<String> {
            let mut s = Zeroizing::new(String::with_capacity(100));
            s.push_str("x'");
            s.push_str(&self.key.to_hex());
            s.push('\'');
            s
        }

        /// Ask `provider` for the key of the database at `path` (once per open).
        pub(crate) fn obtain(
            provider: &dyn KeyProvider,
            path: &Path,
            plaintext_header: bool,
        ) -> Result<Cipher> {
            let exists = std::fs::metadata(path).is_ok_and(|m| m.len() > 0)
                || std::fs::metadata(wal_path(path)).is_ok_and(|m| m.len() > 0);
            let purpose = if exists {
                KeyPurpose::Open
            } else {
                KeyPurpose::Create
            };
            Self::obtain_for(provider, path, plaintext_header, purpose)
        }

        /// Ask `provider` for a key for `purpose`: an open store asks its new
        /// key's provider with `Create` before a rotation (the provider may make
        /// the key, and must keep it before it returns), and its own provider
        /// with `Open` when it meets a file another process rotated.
        pub(crate) fn obtain_for(
            provider: &dyn KeyProvider,
            path: &Path,
            plaintext_header: bool,
            purpose: KeyPurpose,
        ) -> Result<Cipher> {
            let op = "obtain the data key";
            let path_buf = path.to_path_buf();
            match provider.data_key(path, purpose) {
                Ok(key) => Ok(Cipher::new(key, plaintext_header)),
                Err(KeyError::Unavailable(detail)) => Err(Error::KeyUnavailable {
                    op,
                    path: path_buf,
                    detail,
                }),
                Err(KeyError::Lost(detail)) => Err(Error::KeyLost {
                    op,
                    path: path_buf,
                    detail,
                }),
            }
        }

        /// Key `conn`: the first statements on every connection, before any read.
        pub(crate) fn apply(&self, conn: &rusqlite::Connection) -> rusqlite::Result<()> {
            sqlcipher_started()?;
            quiet_sqlcipher_log(conn);
            let mut sql = Zeroizing::new(String::with_capacity(160));
            sql.push_str("PRAGMA key = \"x'");
            sql.push_str(&self.key.to_hex());
            sql.push_str("'\";");
            if self.plaintext_header {
                sql.push_str(" PRAGMA cipher_plaintext_header_size = 32;");
            }
            let mac = self.page_mac(conn);
            if mac != PageMac::Sha512 {
                sql.push_str(" PRAGMA cipher_hmac_algorithm = ");
                sql.push_str(mac.pragma_name());
                sql.push(';');
            }
            conn.execute_batch(&sql)
        }

        /// Judge the first bytes of an existing, non-empty file before SQLite sees
        /// it: a plaintext SQLite file is [`Error::NotEncrypted`]. Anything else
        /// is SQLCipher's to judge (a wrong key shows at the first read).
        pub(crate) fn check_header(&self, path: &Path, header: &[u8]) -> Result<()> {
            let magic = header.len() >= SQLITE_MAGIC.len() && &header[..16] == SQLITE_MAGIC;
            // Without the plaintext header an encrypted file starts with its salt
            // (random bytes); with it, the magic stays and byte 20 says SQLCipher
            // reserves room for its IV and HMAC on every page. A file in the other
            // layout than the one asked for is SQLCipher's to refuse (wrong key).
            let plaintext = magic
                && header.len() >= PLAINTEXT_HEADER_BYTES
                && !is_sqlcipher_reserve(header[20]);
            if plaintext {
                return Err(Error::NotEncrypted {
                    op: "check database header",
                    path: path.to_path_buf(),
                });
            }
            Ok(())
        }
    }
}
