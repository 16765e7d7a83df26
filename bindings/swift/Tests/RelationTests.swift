// Typed relations from Swift: `including` through the
// generated relation handle of examples/blog/schema/relations.fbs (module
// RelModel) gives each post its author (nil for an absent or dangling
// reference), a filter through the reference keeps the posts whose author
// matches, and the live form delivers a row-level `updated` diff when only
// an author is renamed. Real database files.

import Foundation
import XCTest
import Keel
import RelModel

final class RelationTests: XCTestCase {
    func openRel(_ name: String) async throws -> Database {
        try await Keel.openAsync(path: try tempDir().appendingPathComponent(name).path,
                                 schema: RelationsSchema.self, options: fastOptions())
    }

    func testIncludingGivesEachPostItsAuthor() async throws {
        let db = try await openRel("including.db")
        try await db.write { txn in
            try txn.insert(Author(id: "ada", name: "Ada"))
            try txn.insert(Author(id: "bob", name: "Bob"))
            try txn.insert(Post(id: "p1", title: "One", author: "ada", rank: 1))
            try txn.insert(Post(id: "p2", title: "Two", author: "bob", rank: 2))
            try txn.insert(Post(id: "p3", title: "Three", author: "ghost", rank: 3))
            try txn.insert(Post(id: "p4", title: "Four", rank: 4))
        }
        let rows: [KeelIncluded<Post, Author>] = try db.fetch(Post.self)
            .sorted(by: Post.rank.ascending)
            .including(Post.authorRef)
            .all()
        XCTAssertEqual(rows.map(\.object.id), ["p1", "p2", "p3", "p4"])
        XCTAssertEqual(rows.map { $0.related?.id }, ["ada", "bob", nil, nil])
        XCTAssertEqual(rows[0].related, Author(id: "ada", name: "Ada"))
        // The fetch's filter and limit are kept.
        let bobs = try db.fetch(Post.self).where(Post.author == "bob").limit(1)
            .including(Post.authorRef).all()
        XCTAssertEqual(bobs.map { [$0.object.id, $0.related?.name] }, [["p2", "Bob"]])
        // Another relation of the same post type (nullify editor): all absent.
        XCTAssertEqual(try db.fetch(Post.self).including(Post.editorRef).all().compactMap(\.related), [])
        // Filter through the reference: the posts whose author matches.
        let byAda = try db.fetch(Post.self).where(Post.authorRef, matches: Author.name == "Ada")
            .sorted(by: Post.rank.ascending).all()
        XCTAssertEqual(byAda.map(\.id), ["p1"])
        let byBobOrAda = try db.fetch(Post.self)
            .where(Post.authorRef, matches: Author.name == "Ada" || Author.name == "Bob")
            .sorted(by: Post.rank.descending).including(Post.authorRef).all()
        XCTAssertEqual(byBobOrAda.map { $0.related?.name }, ["Bob", "Ada"])
        XCTAssertEqual(try db.fetch(Post.self).where(Post.authorRef, matches: Author.name == "Cy").count(), 0)
        // Inside a write transaction: a typed error, not a read outside it.
        let thrown: Bool = try await db.write { txn in
            do {
                _ = try txn.fetch(Post.self).including(Post.authorRef).all()
                return false
            } catch KeelError.InvalidArgument {
                return true
            }
        }
        XCTAssertTrue(thrown)
    }

    func testLiveIncludingUpdatesWhenTheAuthorIsRenamed() async throws {
        let db = try await openRel("live.db")
        try await db.write { txn in
            try txn.insert(Author(id: "ada", name: "Ada"))
            try txn.insert(Author(id: "bob", name: "Bob"))
            try txn.insert(Post(id: "p1", author: "ada", rank: 1))
            try txn.insert(Post(id: "p2", author: "bob", rank: 2))
            try txn.insert(Post(id: "p3", author: "ada", rank: 3))
        }
        let updates = db.fetch(Post.self).sorted(by: Post.rank.ascending)
            .including(Post.authorRef).updates()
        var it = updates.makeAsyncIterator()
        let first = try await it.next()
        XCTAssertEqual(first?.diff.inserted, [0, 1, 2])
        XCTAssertEqual(first?.objects.map { $0.related?.name }, ["Ada", "Bob", "Ada"])

        // Only the author changes: the posts naming her are updated, in place.
        try await db.write { try $0.update(Author(id: "ada", name: "Ada Lovelace")) }
        let renamed = try await it.next()
        XCTAssertEqual(renamed?.diff.updated, [0, 2])
        XCTAssertEqual(renamed?.diff.inserted, [])
        XCTAssertEqual(renamed?.diff.removed, [])
        XCTAssertEqual(renamed?.diff.moved, [])
        XCTAssertEqual(renamed?.objects.map { $0.related?.name }, ["Ada Lovelace", "Bob", "Ada Lovelace"])
        XCTAssertEqual(renamed?.objects.map(\.object.id), ["p1", "p2", "p3"])

        // A new post: inserted where the order puts it, with its author.
        try await db.write { try $0.insert(Post(id: "p0", author: "bob", rank: 0)) }
        let inserted = try await it.next()
        XCTAssertEqual(inserted?.diff.inserted, [0])
        XCTAssertEqual(inserted?.objects.first?.related?.name, "Bob")
        XCTAssertEqual(updates.deliveries, 3)

        updates.cancel()
        XCTAssertFalse(updates.isActive)
        try await db.write { try $0.update(Author(id: "bob", name: "Robert")) }
        XCTAssertEqual(updates.deliveries, 3, "nothing after cancel")
    }

    func testIncludingAToManyReferenceFollowsTheTags() async throws {
        let db = try await openRel("tags.db")
        try await db.write { txn in
            try txn.insert(Tag(id: "db", label: "DB"))
            try txn.insert(Tag(id: "rust", label: "Rust"))
            try txn.insert(Post(id: "p1", tags: ["rust", "db"], rank: 1))
            try txn.insert(Post(id: "p2", tags: ["swift"], rank: 2))
            try txn.insert(Post(id: "p3", rank: 3))
        }
        let rows: [KeelIncludedMany<Post, Tag>] = try db.fetch(Post.self)
            .sorted(by: Post.rank.ascending).including(Post.tagsRef).all()
        XCTAssertEqual(rows.map { $0.related.map(\.label) }, [["Rust", "DB"], [], []])
        // The count over the relation: existing tags only.
        let counts = try db.fetch(Post.self).sorted(by: Post.rank.ascending).including(Post.tagsRef).counts()
        XCTAssertEqual(counts.map(\.object.id), ["p1", "p2", "p3"])
        XCTAssertEqual(counts.map(\.count), [2, 0, 0])

        let updates = db.fetch(Post.self).sorted(by: Post.rank.ascending)
            .including(Post.tagsRef).updates()
        var it = updates.makeAsyncIterator()
        let first = try await it.next()
        XCTAssertEqual(first?.diff.inserted, [0, 1, 2])
        // A relabel updates the post holding the tag, in the vector's order.
        try await db.write { try $0.update(Tag(id: "db", label: "Databases")) }
        let relabelled = try await it.next()
        XCTAssertEqual(relabelled?.diff.updated, [0])
        XCTAssertEqual(relabelled?.objects[0].related.map(\.label), ["Rust", "Databases"])
        // The tag the second post names appears: its row fills.
        try await db.write { try $0.insert(Tag(id: "swift", label: "Swift")) }
        let filled = try await it.next()
        XCTAssertEqual(filled?.diff.updated, [1])
        XCTAssertEqual(filled?.objects[1].related.map(\.id), ["swift"])
        updates.cancel()
    }

    func testALiveListFilteredThroughTheAuthorFollowsRenames() async throws {
        let db = try await openRel("where.db")
        try await db.write { txn in
            try txn.insert(Author(id: "a1", name: "Ada"))
            try txn.insert(Author(id: "a2", name: "Bob"))
            try txn.insert(Post(id: "p1", author: "a1", rank: 1))
            try txn.insert(Post(id: "p2", author: "a2", rank: 2))
            try txn.insert(Post(id: "p3", author: "a1", rank: 3))
        }
        let byAda = db.fetch(Post.self).sorted(by: Post.rank.ascending)
            .including(Post.authorRef).where(Author.name == "Ada")
        XCTAssertEqual(try byAda.all().map(\.object.id), ["p1", "p3"])
        let updates = byAda.updates()
        var it = updates.makeAsyncIterator()
        _ = try await it.next()
        // Bob becomes Ada: his post comes in; the first Ada leaves: hers go.
        try await db.write { try $0.update(Author(id: "a2", name: "Ada")) }
        let came = try await it.next()
        XCTAssertEqual(came?.objects.map(\.object.id), ["p1", "p2", "p3"])
        XCTAssertEqual(came?.diff.inserted, [1])
        try await db.write { try $0.update(Author(id: "a1", name: "Ann")) }
        let went = try await it.next()
        XCTAssertEqual(went?.objects.map(\.object.id), ["p2"])
        XCTAssertEqual(went?.diff.removed, [0, 2])
        updates.cancel()
        // To-many: the posts with at least one tag labelled "hot".
        try await db.write { txn in
            try txn.insert(Tag(id: "t1", label: "hot"))
            try txn.update(Post(id: "p3", author: "a1", tags: ["t1", "t9"], rank: 3))
        }
        let hot = try db.fetch(Post.self).including(Post.tagsRef).where(Tag.label == "hot").all()
        XCTAssertEqual(hot.map(\.object.id), ["p3"])
    }

    /// A live list across a relation follows another connection's commits (a
    /// second handle here, as an app extension's process would be): with
    /// `shareChanges`, once keel's feed has caught up with them.
    func testALiveListFollowsAnotherHandlesRename() async throws {
        let path = try tempDir().appendingPathComponent("shared.db").path
        var options = fastOptions()
        options.shareChanges = true
        let app = try await Keel.openAsync(path: path, schema: RelationsSchema.self, options: options)
        let widget = try await Keel.openAsync(path: path, schema: RelationsSchema.self, options: options)
        try await app.write { txn in
            try txn.insert(Author(id: "ada", name: "Ada"))
            try txn.insert(Post(id: "p1", author: "ada", rank: 1))
        }
        let updates = app.fetch(Post.self).including(Post.authorRef).updates()
        // Ends the sequence (next() returns nil) rather than hang if nothing comes.
        let watchdog = Task {
            try? await Task.sleep(nanoseconds: 30_000_000_000)
            updates.cancel()
        }
        defer { watchdog.cancel() }
        var it = updates.makeAsyncIterator()
        let first = try await it.next()
        XCTAssertEqual(first?.objects.map { $0.related?.name }, ["Ada"])
        try await widget.write { try $0.update(Author(id: "ada", name: "Ada L.")) }
        let renamed = try await it.next()
        XCTAssertEqual(renamed?.objects.map { $0.related?.name }, ["Ada L."])
        XCTAssertEqual(renamed?.diff.updated, [0])
        updates.cancel()
    }

    func testAnInverseNavigatesBackToThePosts() async throws {
        let db = try await openRel("inverse.db")
        try await db.write { txn in
            try txn.insert(Author(id: "ada", name: "Ada"))
            try txn.insert(Author(id: "bob", name: "Bob"))
            try txn.insert(Post(id: "p1", author: "ada", rank: 1))
            try txn.insert(Post(id: "p2", author: "ada", rank: 2))
        }
        let authors = db.fetch(Author.self).sorted(by: Author.id.ascending).including(Author.postsRef)
        let rows: [KeelIncludedMany<Author, Post>] = try authors.all()
        XCTAssertEqual(rows.map { $0.related.map(\.id) }, [["p1", "p2"], []])
        XCTAssertEqual(try authors.counts().map(\.count), [2, 0])
        let updates = authors.updates()
        var it = updates.makeAsyncIterator()
        _ = try await it.next()
        try await db.write { try $0.insert(Post(id: "p3", author: "bob", rank: 3)) }
        let next = try await it.next()
        XCTAssertEqual(next?.diff.updated, [1])
        XCTAssertEqual(next?.objects[1].related.map(\.id), ["p3"])
        updates.cancel()
    }

    func testSortedByRelatedOrdersByTheAuthorsName() async throws {
        let db = try await openRel("order.db")
        try await db.write { txn in
            try txn.insert(Author(id: "z", name: "Zoe"))
            try txn.insert(Author(id: "a", name: "Ada"))
            try txn.insert(Post(id: "p1", author: "z", rank: 1))
            try txn.insert(Post(id: "p2", author: "a", rank: 2))
            try txn.insert(Post(id: "p3", rank: 3))
            try txn.insert(Post(id: "p4", author: "a", rank: 4))
        }
        let byRank = db.fetch(Post.self).sorted(by: Post.rank.ascending).including(Post.authorRef)
        // No author first ascending; equal names keep the rank order.
        XCTAssertEqual(try byRank.sorted(byRelated: Author.name.ascending).all().map(\.object.id),
                       ["p3", "p2", "p4", "p1"])
        XCTAssertEqual(try byRank.sorted(byRelated: Author.name.descending).all().map(\.object.id),
                       ["p1", "p2", "p4", "p3"])
        // The limit applies after the order.
        let top = try db.fetch(Post.self).sorted(by: Post.rank.ascending).limit(1)
            .including(Post.authorRef).sorted(byRelated: Author.name.descending).all()
        XCTAssertEqual(top.map(\.object.id), ["p1"])
        try await db.close()
    }

    func testALiveListEndsWithClosedWhenTheDatabaseCloses() async throws {
        let db = try await openRel("closed.db")
        try await db.write { try $0.insert(Post(id: "p1", rank: 1)) }
        let updates = db.fetch(Post.self).including(Post.authorRef).updates()
        var it = updates.makeAsyncIterator()
        _ = try await it.next()
        try await db.close()
        do {
            while try await it.next() != nil {}
            XCTFail("the stream ended without an error")
        } catch KeelError.Closed {
            // What a closed database ends a live stream with.
        }
        XCTAssertFalse(updates.isActive)
    }

    func testDiffApplyMakesTheNewListFromTheOldOneMovesIncluded() {
        let new = ["e", "b", "x", "d", "c"]
        // a removed; x inserted; e and c moved (b and d keep their order); d updated.
        let d = Diff(removed: [0], inserted: [2], moved: [Move(from: 4, to: 0), Move(from: 2, to: 4)],
                     updated: [3])
        var shown = ["a", "b", "c", "d", "e"]
        var asked: [Int] = []
        d.apply(to: &shown) { i in
            asked.append(i)
            return new[i]
        }
        XCTAssertEqual(shown, new)
        XCTAssertEqual(asked.sorted(), [2, 3])
        var inPlace = ["a", "b", "c"]
        Diff(removed: [1], inserted: [2], moved: [], updated: [0])
            .apply(to: &inPlace) { ["A", "c", "d"][$0] }
        XCTAssertEqual(inPlace, ["A", "c", "d"])
    }

    func testALiveListAppliesKeelsDiffsAndEqualsAFreshFetch() async throws {
        let db = try await openRel("applied.db")
        try await db.write { txn in
            for a in 0..<4 { try txn.insert(Author(id: "a\(a)", name: "A\(a)")) }
            for p in 0..<12 { try txn.insert(Post(id: "p\(p)", author: "a\(p % 4)", rank: Int32(p))) }
        }
        let fetch = db.fetch(Post.self).where(Post.rank < 8).sorted(by: Post.rank.ascending)
            .including(Post.authorRef)
        var it = fetch.updates().makeAsyncIterator()
        let first = try await it.next()
        XCTAssertEqual(first?.objects, try fetch.all())
        let edits: [@Sendable (KeelWriteTransaction) throws -> Void] = [
            { try $0.update(Author(id: "a1", name: "Renamed")) },
            { try $0.update(Post(id: "p2", author: "a3", rank: 9)) },
            { try $0.insert(Post(id: "p20", author: "a0", rank: 0)) },
            { try $0.update(Post(id: "p7", author: "a2", rank: 1)) },
            { try $0.delete(Post.self, key: "p4") },
        ]
        for edit in edits {
            try await db.write { txn in try edit(txn) }
            let got = try await it.next()
            XCTAssertEqual(got?.objects, try fetch.all())
        }
    }
}

