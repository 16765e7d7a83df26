//! Missing parent directories of a database are created with mode 0700 whatever the
//! process umask (under umask 000 they were world-writable). The umask is
//! process-wide, so each case runs this test binary again under `sh -c 'umask …'`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use keel_storage::{Store, StoreOptions};

const CHILD: &str = "KEEL_PRIVATE_DIRS_CHILD";
const NAME: &str = "missing_parent_directories_are_private_whatever_the_umask";

/// In the child: open a database three missing directories deep under `root`.
fn child(root: &Path) {
    let path = root.join("a").join("b").join("c").join("app.db");
    Store::open(&path, StoreOptions::default())
        .unwrap()
        .close()
        .unwrap();
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn missing_parent_directories_are_private_whatever_the_umask() {
    if let Ok(root) = std::env::var(CHILD) {
        child(Path::new(&root));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for umask in ["000", "077", "022", "777"] {
        let root = dir.path().join(format!("umask{umask}"));
        std::fs::create_dir(&root).unwrap();
        let exe = std::env::current_exe().unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "umask {umask} && exec \"$0\" --exact {NAME} --test-threads=1"
            ))
            .arg(&exe)
            .env(CHILD, &root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "umask {umask}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let a = root.join("a");
        for d in [a.clone(), a.join("b"), a.join("b").join("c")] {
            assert_eq!(mode(&d), 0o700, "{} under umask {umask}", d.display());
        }
        let file = a.join("b").join("c").join("app.db");
        assert_eq!(mode(&file), 0o600, "the database file under umask {umask}");
    }
    // A directory that exists is left as it is.
    let existing = dir.path().join("mine");
    std::fs::create_dir(&existing).unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o755)).unwrap();
    Store::open(existing.join("x.db"), StoreOptions::default())
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(mode(&existing), 0o755);
}
