// Typed full-text search from Swift: `matches` on the generated
// handles of bindings/swift/Tests/search.fbs (module SearchModel), `search`,
// relevance order, highlight and snippet ranges, malformed query text as a
// typed error, and a live search that equals a fresh search after every write.

import Foundation
import XCTest
import Keel
import SearchModel

final class SearchTests: XCTestCase {
    func notes() -> [Note] {
        [
            Note(id: "en", title: "Rust async runtimes", body: "Tokio and async-std compared", pinned: true),
            Note(id: "de", title: "Größe und Maße", body: "Eine Übersicht über Einheiten"),
            Note(id: "fr", title: "Crème brûlée", body: "Une recette française", tags: ["dessert"]),
            Note(id: "zh", title: "北京大学", body: "中文分词测试"),
            Note(id: "ja", title: "東京タワー", body: "日本語のテキスト"),
            Note(id: "ko", title: "한국어 검색", body: "대한민국"),
            Note(id: "emoji", title: "Party 🎉 time", body: "rust at the party"),
        ]
    }

    func testTypedSearchFoldsScriptsRanksAndHighlights() async throws {
        let db = try await Keel.openAsync(path: try tempDir().appendingPathComponent("search.db").path,
                                          schema: SearchSchema.self, options: fastOptions())
        let all = notes()
        try await db.write { txn in for n in all { try txn.insert(n) } }
        func ids(_ p: KeelPredicate<Note>) throws -> [String] {
            try db.fetch(Note.self).where(p).all().map(\.id).sorted()
        }
        // diacritic and case folding, both ways
        XCTAssertEqual(try ids(Note.title.matches("creme brulee")), ["fr"])
        XCTAssertEqual(try ids(Note.title.matches("GROSSE") || Note.title.matches("größe")), ["de"])
        // one- and two-character CJK words inside longer runs
        XCTAssertEqual(try ids(Note.title.matches("大学")), ["zh"])
        XCTAssertEqual(try ids(Note.title.matches("京")), ["ja", "zh"])
        XCTAssertEqual(try ids(Note.title.matches("검색")), ["ko"])
        // prefix, combined with other filters
        XCTAssertEqual(try ids(Note.title.matches("asy*") && Note.pinned == true), ["en"])
        XCTAssertEqual(try ids(Note.title.matches("asy*") && Note.pinned == false), [])
        // every searchable field, [string] ones too
        XCTAssertEqual(try ids(.search("dessert")), ["fr"])
        XCTAssertEqual(try ids(.search("rust")), ["emoji", "en"])
        // relevance: the title weighs 2.0, the body 1.0
        let ranked = try db.fetch(Note.self).where(.search("rust")).sorted(by: .relevance).all()
        XCTAssertEqual(ranked.map(\.id), ["en", "emoji"])
        let reversed = try db.fetch(Note.self).where(.search("rust")).sorted(by: .relevanceReversed).all()
        XCTAssertEqual(reversed.map(\.id), ["emoji", "en"])
        // ranges, not markup, as String indices (the emoji is two UTF-16 units)
        let text = "Party 🎉 time with Crème"
        let r = try Keel.highlight(text, query: "creme")
        XCTAssertEqual(r.map { String(text[$0]) }, ["Crème"])
        let s = try XCTUnwrap(try Keel.snippet(text, query: "creme", maxCharacters: 40))
        XCTAssertEqual(s.highlights.map { String(text[$0]) }, ["Crème"])
        XCTAssertTrue(text[s.passage].contains("Crème"))
        XCTAssertNil(try Keel.snippet(text, query: "absent"))
        // malformed query text is a typed error, not an SQL message
        XCTAssertThrowsError(try db.fetch(Note.self).where(Note.title.matches("\"unclosed")).all()) { e in
            guard case KeelError.InvalidArgument = e else {
                return XCTFail("not InvalidArgument: \(e)")
            }
        }
        try await db.close()
    }

    func testLiveSearchEqualsAFreshSearchAfterEveryWrite() async throws {
        let db = try await Keel.openAsync(path: try tempDir().appendingPathComponent("live.db").path,
                                          schema: SearchSchema.self, options: fastOptions())
        let query = db.fetch(Note.self).where(.search("rust")).sorted(by: .relevance)
        let updates = query.updates()
        let writes: [@Sendable (KeelWriteTransaction) throws -> Void] = [
            { try $0.insert(Note(id: "a", body: "rust")) },
            { try $0.insert(Note(id: "b", title: "rust rust", body: "about rust")) },
            { try $0.insert(Note(id: "c", title: "nothing here")) },
            { try $0.update(Note(id: "c", title: "now rust")) },
            { try $0.delete(Note(id: "b")) },
            { try $0.update(Note(id: "a", body: "no longer")) },
        ]
        // A write that leaves the result as it was delivers nothing: wait for a
        // delivery only when a fresh search differs from the last one delivered.
        var it = updates.makeAsyncIterator()
        let first = try await it.next()
        var last = try XCTUnwrap(first).objects
        XCTAssertEqual(last, try query.all())
        for (step, w) in writes.enumerated() {
            try await db.write { txn in try w(txn) }
            let fresh = try query.all()
            if fresh != last {
                let next = try await it.next()
                last = try XCTUnwrap(next, "no delivery after write \(step)").objects
            }
            XCTAssertEqual(last.map(\.id), fresh.map(\.id), "after write \(step)")
            XCTAssertEqual(last, fresh, "after write \(step)")
        }
        try await db.close()
    }
}
