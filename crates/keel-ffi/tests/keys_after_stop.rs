//! After `stop_callbacks` (a host shutting its runtime down) keel no longer calls
//! into foreign code, the key provider included: an encrypted open then fails
//! with `KeyUnavailable` — retry, never a new key — and creates no file. A binary
//! of its own, since the stop holds for the rest of the process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use keel_ffi::{
    open_blocking, stop_callbacks, Encryption, KeelError, KeyError, KeyProvider, KeyPurpose,
    KeySource, OpenOptions,
};

struct Counting(AtomicUsize);

impl KeyProvider for Counting {
    fn data_key(&self, _: String, _: KeyPurpose) -> Result<Vec<u8>, KeyError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(KeyError::Lost {
            reason: "must not be asked".into(),
        })
    }
}

#[test]
fn after_stop_callbacks_the_provider_is_not_called_and_nothing_is_created() {
    assert!(stop_callbacks(1000));
    let dir = tempfile::tempdir().unwrap();
    let provider = Arc::new(Counting(AtomicUsize::new(0)));
    let options = OpenOptions {
        encryption: Some(Encryption {
            key: KeySource::Provider {
                provider: Arc::clone(&provider) as Arc<dyn KeyProvider>,
            },
            plaintext_header: false,
        }),
        ..OpenOptions::default()
    };
    let path = dir.path().join("s.db").display().to_string();
    let schema = "table Note { id: long (primary); } root_type Note;";
    match open_blocking(path, schema.into(), options, None) {
        Err(KeelError::KeyUnavailable { .. }) => {}
        Err(e) => panic!("expected KeyUnavailable, got {e:?}"),
        Ok(_) => panic!("opened without a key"),
    }
    assert_eq!(provider.0.load(Ordering::SeqCst), 0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
