//! `README.md` and `docs/*.md` link only to files in the repository: a reader of a
//! clone must be able to follow every link.

use std::path::{Component, Path, PathBuf};

/// Every markdown link target `](…)` in `text` that is not a web address or an
/// anchor in the same page.
fn local_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or("").trim();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push(target.to_string());
        }
        rest = &rest[end..];
    }
    out
}

/// `path` with `.` and `..` resolved lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn readme_and_docs_link_only_to_files_in_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    let mut bad = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let dir = page.parent().unwrap();
        for link in local_links(&text) {
            let target = normalize(&dir.join(&link));
            if !target.starts_with(root) || !target.exists() {
                bad.push(format!(
                    "{}: {link}",
                    page.strip_prefix(root).unwrap().display()
                ));
            }
        }
        // Paths in code spans that leave the repository (`../shared/…`) are links too.
        if text.contains("../shared/") {
            bad.push(format!(
                "{}: mentions ../shared/",
                page.strip_prefix(root).unwrap().display()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "links to files outside the repository: {bad:#?}"
    );
    assert!(root.join("docs/architecture.md").exists());
}
