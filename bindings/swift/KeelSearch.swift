// Full-text search in the typed layer (docs/search.md): `matches` on the
// generated handles of `(searchable)` fields, `search` over every searchable
// field, relevance order, and highlight/snippet ranges as `String` indices.
//
//     let hits = try db.fetch(Note.self)
//         .where(Note.title.matches("rust async") && Note.pinned == true)
//         .sorted(by: .relevance)
//         .all()
//     let ranges = try Keel.highlight(hits[0].title ?? "", query: "rust async")
//
// Matching is keel's tokenizer (case and diacritic folding, CJK bigrams) in
// every language; malformed query text throws `KeelError.InvalidArgument` when
// the query runs, with the offset of the problem.

import Foundation

extension KeelField where Value == String {
    /// The field matches `query` in keel's full-text query language (words,
    /// `"phrases"`, `prefix*`, `AND`, `OR`, `NOT`, `NEAR(…)`). The field must be
    /// `(searchable)` in the schema; otherwise the query throws when it runs.
    public func matches(_ query: String) -> KeelPredicate<Root> {
        KeelPredicate(Expr.matches(field: keelPath, query: query))
    }
}

extension KeelPredicate {
    /// Full-text search over every `(searchable)` field of the collection.
    public static func search(_ query: String) -> KeelPredicate {
        KeelPredicate(Expr.search(query: query))
    }
}

extension KeelSort {
    /// Relevance order (bm25 with the fields' `(searchable: weight)`), best match
    /// first. The query needs a `matches` or `search` filter to rank by; live
    /// queries keep this order too.
    public static var relevance: KeelSort { KeelSort(relevanceDescending: false) }

    /// Relevance order, worst match first.
    public static var relevanceReversed: KeelSort { KeelSort(relevanceDescending: true) }
}

/// A passage of a text around its first match, with the matches inside it.
public struct KeelSnippet: Sendable, Equatable {
    /// The passage, as a range of the text searched.
    public let passage: Range<String.Index>
    /// The matched ranges inside the passage.
    public let highlights: [Range<String.Index>]
}

extension Keel {
    /// The ranges of `text` that `query` matches (merged where they touch), for
    /// the app to style: no markup is inserted.
    public static func highlight(_ text: String, query: String) throws -> [Range<String.Index>] {
        try searchHighlight(text: text, query: query).map { range($0, in: text) }
    }

    /// A passage of at most `maxCharacters` characters of `text` around the first
    /// match of `query`, with the matches inside it; `nil` when nothing matches.
    public static func snippet(_ text: String, query: String, maxCharacters: Int = 120) throws
        -> KeelSnippet?
    {
        let s = try searchSnippet(
            text: text, query: query, maxChars: UInt32(clamping: max(maxCharacters, 0)))
        if s.highlights.isEmpty { return nil }
        return KeelSnippet(
            passage: range(s.passage, in: text),
            highlights: s.highlights.map { range($0, in: text) })
    }

    /// A `TextRange` (UTF-16 offsets are what `String.Index` can take directly) as
    /// indices of `text`.
    private static func range(_ r: TextRange, in text: String) -> Range<String.Index> {
        let u = text.utf16
        let lo = u.index(u.startIndex, offsetBy: Int(r.startUtf16))
        let hi = u.index(u.startIndex, offsetBy: Int(r.endUtf16))
        return lo..<hi
    }
}
