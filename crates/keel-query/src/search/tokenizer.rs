//! keel's full-text tokenizer: one rule set for every script, run in Rust, so the
//! FTS5 table only ever sees a space-separated stream of finished tokens (its
//! built-in `ascii` tokenizer splits that stream on spaces and keeps every
//! non-ASCII character as part of a token). No custom C tokenizer, no `unsafe`.
//!
//! The rules (see `docs/search.md` for what they cost):
//!
//! * **Words** — runs of letters and digits of any alphabetic script (Latin,
//!   Greek, Cyrillic, Arabic, …) — are lower-cased and, for Latin, stripped of
//!   diacritics (`É` → `e`, `ß` → `ss`, `Œ` → `oe`; combining marks are dropped, so
//!   decomposed input folds the same way). Fullwidth ASCII folds to ASCII.
//! * **CJK runs** (Han, Hiragana, Katakana, Hangul) have no spaces between words,
//!   so each run of `n` characters becomes its `n - 1` overlapping bigrams followed
//!   by its last character alone: `東京都` → `東京 京都 都`. A two-character query
//!   word is one bigram, a longer one the phrase of its bigrams, and a
//!   one-character word the prefix of a token (`京*` finds `京都` and a trailing
//!   `京`), so words of one and two characters are found inside longer runs.
//! * **Emoji** and other pictographs are a token each.
//! * Everything else (spaces, punctuation, symbols, variation selectors, ZWJ)
//!   separates tokens.

use std::ops::Range;

/// What kind of text a token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A folded word.
    Word,
    /// A CJK bigram, or the last character of a CJK run.
    Cjk,
    /// One pictograph.
    Emoji,
}

/// One token of the stream: its indexed text and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    /// The text as indexed (folded).
    pub(crate) text: String,
    /// Byte range in the original text.
    pub(crate) range: Range<usize>,
    /// What it came from.
    pub(crate) kind: Kind,
    /// For a CJK token: the last of its run (a single character at the end).
    pub(crate) run_end: bool,
}

/// The separator written between the elements of a `[string]` field: a
/// private-use character, which the tokenizer never produces, so no query token
/// equals it or has it as a prefix and no phrase spans two elements.
pub(crate) const ELEMENT_BREAK: &str = "\u{E000}";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Word,
    Mark,
    Cjk,
    Emoji,
    Sep,
}

fn class(c: char) -> Class {
    // Most text a phone indexes is ASCII: decide it in one test.
    if c.is_ascii() {
        return if c.is_ascii_alphanumeric() {
            Class::Word
        } else {
            Class::Sep
        };
    }
    let u = c as u32;
    if matches!(u,
        0x1100..=0x11FF | 0x2E80..=0x2FDF | 0x3040..=0x30FF | 0x3130..=0x318F
        | 0x31F0..=0x31FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xA960..=0xA97F
        | 0xAC00..=0xD7AF | 0xD7B0..=0xD7FF | 0xF900..=0xFAFF | 0xFF66..=0xFF9F
        | 0x20000..=0x3FFFF)
    {
        return Class::Cjk;
    }
    if matches!(u, 0x1F000..=0x1FAFF | 0x2600..=0x27BF | 0x2B00..=0x2BFF | 0x2300..=0x23FF)
        && !matches!(u, 0x1F3FB..=0x1F3FF)
    {
        return Class::Emoji;
    }
    if matches!(u, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF) {
        return Class::Mark;
    }
    if c.is_alphanumeric() {
        return Class::Word;
    }
    Class::Sep
}

/// Appends `c` lower-cased and without its diacritic to `out`.
fn fold_into(c: char, out: &mut String) {
    let u = c as u32;
    // Fullwidth ASCII letters and digits.
    if matches!(u, 0xFF10..=0xFF19 | 0xFF21..=0xFF3A | 0xFF41..=0xFF5A) {
        if let Some(a) = char::from_u32(u - 0xFEE0) {
            out.push(a.to_ascii_lowercase());
        }
        return;
    }
    if c.is_ascii() {
        out.push(c.to_ascii_lowercase());
        return;
    }
    for l in c.to_lowercase() {
        match fold_latin(l) {
            Some(s) => out.push_str(s),
            None => out.push(l),
        }
    }
}

/// The base letters of a lower-case Latin letter with a diacritic (and the
/// ligatures and special letters a reader types as plain letters).
fn fold_latin(c: char) -> Option<&'static str> {
    Some(match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'ā' | 'ă' | 'ą' | 'ǎ' | 'ạ' | 'ả' | 'ấ' | 'ầ' | 'ẩ'
        | 'ẫ' | 'ậ' | 'ắ' | 'ằ' | 'ẳ' | 'ẵ' | 'ặ' => "a",
        'æ' => "ae",
        'ç' | 'ć' | 'ĉ' | 'ċ' | 'č' => "c",
        'ď' | 'đ' | 'ð' => "d",
        'è' | 'é' | 'ê' | 'ë' | 'ē' | 'ĕ' | 'ė' | 'ę' | 'ě' | 'ẹ' | 'ẻ' | 'ẽ' | 'ế' | 'ề' | 'ể'
        | 'ễ' | 'ệ' => "e",
        'ĝ' | 'ğ' | 'ġ' | 'ģ' => "g",
        'ĥ' | 'ħ' => "h",
        'ì' | 'í' | 'î' | 'ï' | 'ĩ' | 'ī' | 'ĭ' | 'į' | 'ı' | 'ǐ' | 'ỉ' | 'ị' => "i",
        'ĳ' => "ij",
        'ĵ' => "j",
        'ķ' => "k",
        'ĺ' | 'ļ' | 'ľ' | 'ŀ' | 'ł' => "l",
        'ñ' | 'ń' | 'ņ' | 'ň' | 'ŉ' => "n",
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'ō' | 'ŏ' | 'ő' | 'ơ' | 'ǒ' | 'ọ' | 'ỏ' | 'ố' | 'ồ'
        | 'ổ' | 'ỗ' | 'ộ' | 'ớ' | 'ờ' | 'ở' | 'ỡ' | 'ợ' => "o",
        'œ' => "oe",
        'ŕ' | 'ŗ' | 'ř' => "r",
        'ś' | 'ŝ' | 'ş' | 'š' | 'ș' | 'ſ' => "s",
        'ß' => "ss",
        'ţ' | 'ť' | 'ŧ' | 'ț' => "t",
        'þ' => "th",
        'ù' | 'ú' | 'û' | 'ü' | 'ũ' | 'ū' | 'ŭ' | 'ů' | 'ű' | 'ų' | 'ư' | 'ǔ' | 'ụ' | 'ủ' | 'ứ'
        | 'ừ' | 'ử' | 'ữ' | 'ự' => "u",
        'ŵ' => "w",
        'ý' | 'ÿ' | 'ŷ' | 'ỳ' | 'ỵ' | 'ỷ' | 'ỹ' => "y",
        'ź' | 'ż' | 'ž' => "z",
        // Greek with tonos or dialytika.
        'ά' => "α",
        'έ' => "ε",
        'ή' => "η",
        'ί' | 'ϊ' | 'ΐ' => "ι",
        'ό' => "ο",
        'ύ' | 'ϋ' | 'ΰ' => "υ",
        'ώ' => "ω",
        'ς' => "σ",
        // Cyrillic yo.
        'ё' => "е",
        _ => return None,
    })
}

/// Tokenizes `text` (see the module docs), calling `emit` with each token in
/// order.
pub(crate) fn tokens(text: &str, emit: &mut dyn FnMut(Token)) {
    let mut it = text.char_indices().peekable();
    while let Some((start, c)) = it.next() {
        match class(c) {
            Class::Sep | Class::Mark => {}
            Class::Emoji => emit(Token {
                text: c.to_string(),
                range: start..start + c.len_utf8(),
                kind: Kind::Emoji,
                run_end: false,
            }),
            Class::Word => {
                let mut folded = String::new();
                fold_into(c, &mut folded);
                let mut end = start + c.len_utf8();
                while let Some(&(i, d)) = it.peek() {
                    match class(d) {
                        Class::Word => fold_into(d, &mut folded),
                        Class::Mark => {}
                        _ => break,
                    }
                    end = i + d.len_utf8();
                    it.next();
                }
                emit(Token {
                    text: folded,
                    range: start..end,
                    kind: Kind::Word,
                    run_end: false,
                });
            }
            Class::Cjk => {
                let mut run: Vec<(usize, char)> = vec![(start, c)];
                while let Some(&(i, d)) = it.peek() {
                    if class(d) != Class::Cjk {
                        break;
                    }
                    run.push((i, d));
                    it.next();
                }
                cjk_run(&run, emit);
            }
        }
    }
}

/// The tokens of one CJK run: its bigrams, then its last character alone.
fn cjk_run(run: &[(usize, char)], emit: &mut dyn FnMut(Token)) {
    for w in run.windows(2) {
        let (a, b) = (w[0], w[1]);
        let mut text = String::with_capacity(8);
        text.push(a.1);
        text.push(b.1);
        emit(Token {
            text,
            range: a.0..b.0 + b.1.len_utf8(),
            kind: Kind::Cjk,
            run_end: false,
        });
    }
    if let Some(&(i, c)) = run.last() {
        emit(Token {
            text: c.to_string(),
            range: i..i + c.len_utf8(),
            kind: Kind::Cjk,
            run_end: true,
        });
    }
}

/// `text` as the token stream stored in the FTS5 table: the tokens' texts joined
/// by spaces, appended to `out` (after a space if `out` is not empty). The same
/// tokens as [`tokens`], written straight into `out` (no string per token: this
/// runs on every write of a searchable field).
pub(crate) fn stream_into(text: &str, out: &mut String) {
    let sep = |out: &mut String| {
        if !out.is_empty() {
            out.push(' ');
        }
    };
    let mut it = text.chars().peekable();
    let mut run: Vec<char> = Vec::new();
    while let Some(c) = it.next() {
        match class(c) {
            Class::Sep | Class::Mark => {}
            Class::Emoji => {
                sep(out);
                out.push(c);
            }
            Class::Word => {
                sep(out);
                fold_into(c, out);
                while let Some(&d) = it.peek() {
                    match class(d) {
                        Class::Word => fold_into(d, out),
                        Class::Mark => {}
                        _ => break,
                    }
                    it.next();
                }
            }
            Class::Cjk => {
                run.clear();
                run.push(c);
                while let Some(&d) = it.peek() {
                    if class(d) != Class::Cjk {
                        break;
                    }
                    run.push(d);
                    it.next();
                }
                for w in run.windows(2) {
                    sep(out);
                    out.push(w[0]);
                    out.push(w[1]);
                }
                sep(out);
                out.push(run[run.len() - 1]);
            }
        }
    }
}

/// All tokens of `text`.
pub(crate) fn all(text: &str) -> Vec<Token> {
    let mut v = Vec::new();
    tokens(text, &mut |t| v.push(t));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(text: &str) -> String {
        let mut s = String::new();
        stream_into(text, &mut s);
        s
    }

    #[test]
    fn latin_words_fold_case_and_diacritics() {
        assert_eq!(
            stream("Crème Brûlée, STRASSE Straße"),
            "creme brulee strasse strasse"
        );
        // Decomposed input (e + combining acute) folds the same way.
        assert_eq!(stream("Cre\u{0300}me"), "creme");
        assert_eq!(stream("Ｒｕｓｔ２０２４"), "rust2024");
        assert_eq!(stream("Ελληνικά Ёлка"), "ελληνικα елка");
    }

    #[test]
    fn cjk_runs_become_bigrams_and_a_final_unigram() {
        assert_eq!(stream("東京都"), "東京 京都 都");
        assert_eq!(stream("我"), "我");
        assert_eq!(stream("rust東京🦀!"), "rust 東京 京 🦀");
        assert_eq!(stream("한국어 검색"), "한국 국어 어 검색 색");
        let t = all("a東京");
        assert_eq!(t[1].range, 1..7);
        assert_eq!(t[2].range, 4..7);
        assert!(t[2].run_end);
    }

    #[test]
    fn the_stored_stream_is_the_tokens_joined() {
        for text in [
            "Crème brûlée, STRASSE",
            "rust東京🦀!",
            "한국어 검색 a",
            "",
            "x\u{0301}y 東",
        ] {
            let joined: Vec<String> = all(text).into_iter().map(|t| t.text).collect();
            assert_eq!(stream(text), joined.join(" "), "{text}");
        }
    }

    #[test]
    fn separators_and_marks_never_make_tokens() {
        assert_eq!(stream("  ...,;!? \u{FE0F}\u{200D} "), "");
        assert_eq!(stream("\u{0301}"), "");
        assert_eq!(stream(ELEMENT_BREAK), "");
    }
}
