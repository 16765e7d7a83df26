//! `--key-file`: the data key of an encrypted database, kept in a file of its own
//! (keel_storage's `KeyFile` format: 96 hex digits, key then salt, mode 0600).

use std::path::{Path, PathBuf};

use keel_storage::encryption::{DataKey, KeyError, KeyFile};
use keel_storage::rotate::{KeyId, Side};
use serde_json::{json, Value as Json};

use crate::exit::{Failure, Result, USAGE_OR_IO, WRONG_KEY};

/// A key read from a key file, with the header layout it is used with.
#[derive(Debug, Clone)]
pub struct FileKey {
    pub key: DataKey,
    pub plaintext_header: bool,
    /// Where it came from (for messages).
    pub file: PathBuf,
}

impl FileKey {
    /// The key in `file`: missing → exit 2, not a key → exit 6.
    pub fn load(file: &Path, plaintext_header: bool) -> Result<FileKey> {
        match KeyFile::new(file).read() {
            Ok(Some(key)) => Ok(FileKey {
                key,
                plaintext_header,
                file: file.to_path_buf(),
            }),
            Ok(None) => Err(Failure::new(
                USAGE_OR_IO,
                format!("{}: no such key file", file.display()),
            )),
            Err(KeyError::Lost(m)) => Err(Failure::new(WRONG_KEY, m)),
            Err(KeyError::Unavailable(m)) => Err(Failure::new(USAGE_OR_IO, m)),
        }
    }

    /// The key in `file`, or a new random one stored there first (synced, before
    /// any database file changes). The flag says whether it was made now.
    pub fn load_or_create(file: &Path, plaintext_header: bool) -> Result<(FileKey, bool)> {
        if file.exists() {
            return FileKey::load(file, plaintext_header).map(|k| (k, false));
        }
        let key = DataKey::generate()
            .map_err(|e| Failure::new(USAGE_OR_IO, format!("no random bytes for a key: {e}")))?;
        KeyFile::new(file).write_new(&key).map_err(|e| {
            Failure::new(
                USAGE_OR_IO,
                format!("{}: cannot store a new key: {e}", file.display()),
            )
        })?;
        // Read back what is on disk: that is the key the database will need.
        FileKey::load(file, plaintext_header).map(|k| (k, true))
    }

    /// The rotation side this key stores a file as.
    pub fn side(&self) -> Side {
        Side::Encrypted {
            key: self.key.clone(),
            plaintext_header: self.plaintext_header,
        }
    }

    /// The key's id (its salt: not secret) for `--json` output.
    pub fn describe(&self) -> Json {
        json!({
            "key_file": self.file.display().to_string(),
            "key_id": KeyId::of(&self.key).to_string(),
            "plaintext_header": self.plaintext_header,
        })
    }

    /// The same, as one line of text.
    pub fn describe_text(&self) -> String {
        format!(
            "SQLCipher, key {} ({}){}",
            self.file.display(),
            KeyId::of(&self.key),
            if self.plaintext_header {
                ", plaintext header"
            } else {
                ""
            }
        )
    }
}

/// `--key-file F [--plaintext-header]` as given on the command line.
pub fn optional(file: Option<&Path>, plaintext_header: bool) -> Result<Option<FileKey>> {
    file.map(|f| FileKey::load(f, plaintext_header)).transpose()
}
