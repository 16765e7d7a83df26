//! Full-text search helpers for the bindings: where a query matched in a text,
//! as ranges (not markup), in both UTF-8 bytes (Rust, Python bytes, Swift's
//! `utf8` view) and UTF-16 code units (Kotlin/Java strings, `NSString`, Swift's
//! `utf16` view), so each platform styles the matches itself. Filters and
//! relevance order are query expressions (`Expr::matches`, `Expr::search`,
//! `Query::order_by_relevance`).

use crate::error::KeelError;

/// One matched range of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct TextRange {
    /// Start, in UTF-8 bytes.
    pub start: u64,
    /// End (exclusive), in UTF-8 bytes.
    pub end: u64,
    /// Start, in UTF-16 code units.
    pub start_utf16: u64,
    /// End (exclusive), in UTF-16 code units.
    pub end_utf16: u64,
}

/// A passage of a text around the first match: see [`search_snippet`].
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct TextSnippet {
    /// The passage.
    pub passage: TextRange,
    /// The matches inside it, in the whole text's offsets.
    pub highlights: Vec<TextRange>,
}

fn utf16_at(text: &str, byte: usize) -> u64 {
    text.get(..byte)
        .map_or(0, |s| s.chars().map(char::len_utf16).sum::<usize>()) as u64
}

fn range(text: &str, r: std::ops::Range<usize>) -> TextRange {
    TextRange {
        start: r.start as u64,
        end: r.end as u64,
        start_utf16: utf16_at(text, r.start),
        end_utf16: utf16_at(text, r.end),
    }
}

/// The ranges of `text` that `query` (keel's full-text query language) matches,
/// merged where they touch. Malformed query text is `InvalidArgument`.
#[uniffi::export]
pub fn search_highlight(text: String, query: String) -> Result<Vec<TextRange>, KeelError> {
    Ok(keel_query::search::highlight(&text, &query)?
        .into_iter()
        .map(|r| range(&text, r))
        .collect())
}

/// A passage of at most `max_chars` characters of `text` around the first match
/// of `query`, with the matches inside it.
#[uniffi::export]
pub fn search_snippet(
    text: String,
    query: String,
    max_chars: u32,
) -> Result<TextSnippet, KeelError> {
    let s = keel_query::search::snippet(&text, &query, max_chars as usize)?;
    Ok(TextSnippet {
        passage: range(&text, s.range),
        highlights: s.highlights.into_iter().map(|r| range(&text, r)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_come_in_utf8_and_utf16() {
        let r = search_highlight("😀 Crème".into(), "creme".into()).unwrap();
        // The emoji is 4 UTF-8 bytes and 2 UTF-16 units, then a space.
        assert_eq!(
            r,
            vec![TextRange {
                start: 5,
                end: 11,
                start_utf16: 3,
                end_utf16: 8
            }]
        );
        let s = search_snippet("a b c d e f".into(), "d".into(), 100).unwrap();
        assert_eq!(s.highlights.len(), 1);
        assert!(matches!(
            search_highlight("x".into(), "(".into()),
            Err(KeelError::InvalidArgument { .. })
        ));
    }
}
