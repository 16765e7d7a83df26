// Full-text search in the typed Kotlin layer (docs/search.md): `matches` on the
// generated handles of `(searchable)` fields, `search` over every searchable
// field, relevance order, and highlight/snippet ranges as `IntRange`s of the
// string (UTF-16 indices, what `substring` and spans take).
//
//     db.fetch(Note).where((Note.title matches "rust async") and (Note.pinned eq true))
//         .orderBy(relevance()).all()
//
// Malformed query text throws `KeelException.InvalidArgument` when the query runs.

package dev.keel

import dev.keel.ffi.Expr
import dev.keel.ffi.TextRange
import dev.keel.ffi.searchHighlight
import dev.keel.ffi.searchSnippet

/**
 * The `(searchable)` string field matches [query] in keel's full-text query
 * language (words, `"phrases"`, `prefix*`, `AND`, `OR`, `NOT`, `NEAR(…)`).
 */
infix fun <O> Field<O, String>.matches(query: String): Predicate<O> = Predicate(Expr.matches(keelPath, query))

/**
 * A `(searchable)` field the generator gives no comparable handle (a `[string]`
 * field, `Note.tags`) matches [query].
 */
infix fun <O> FieldRef<O>.matchesText(query: String): Predicate<O> = Predicate(Expr.matches(keelPath, query))

/** Full-text search over every `(searchable)` field of the collection. */
fun <O> search(query: String): Predicate<O> = Predicate(Expr.search(query))

/**
 * Relevance order (bm25 with the fields' `(searchable: weight)`): best match first,
 * or worst first when [worstFirst]. The query needs a `matches` or `search` filter;
 * live queries keep this order too.
 */
fun <O> relevance(worstFirst: Boolean = false): SortKey<O> = SortKey("", worstFirst, relevance = true)

/** A passage of a text around its first match, with the matches inside it. */
data class Snippet(
    /** The passage, as indices of the text searched. */
    val passage: IntRange,
    /** The matched ranges inside it. */
    val highlights: List<IntRange>,
)

/** Highlight and snippet helpers: ranges for the app to style, never markup. */
object Search {
    /** The ranges of [text] that [query] matches, merged where they touch. */
    fun highlight(text: String, query: String): List<IntRange> = searchHighlight(text, query).map { it.toIntRange() }

    /**
     * A passage of at most [maxChars] characters of [text] around the first match of
     * [query], with the matches inside it; `null` when nothing matches.
     */
    fun snippet(text: String, query: String, maxChars: Int = 120): Snippet? {
        val s = searchSnippet(text, query, maxChars.coerceAtLeast(0).toUInt())
        if (s.highlights.isEmpty()) return null
        return Snippet(s.passage.toIntRange(), s.highlights.map { it.toIntRange() })
    }

    private fun TextRange.toIntRange(): IntRange = startUtf16.toInt() until endUtf16.toInt()
}
