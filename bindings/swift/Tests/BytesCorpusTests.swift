// The shared hostile-bytes corpus (tests/bytes/corpus.txt) run through Swift's
// runtime: every vector decodes, through the model `keel codegen swift` made of
// tests/bytes/corpus.fbs (module CorpusModel), to exactly the verdict Rust and
// Kotlin reach (`accept:` and the decoded value in the corpus's canonical form,
// or `reject:` and the error kind). Any disagreement fails the test, listed.

import Foundation
import XCTest
import Keel
import BlogModel
import CorpusModel

final class BytesCorpusTests: XCTestCase {
    /// The corpus file (`KEEL_ROOT` is set by `cargo xtask swift-test`).
    static var corpusPath: String {
        let root = ProcessInfo.processInfo.environment["KEEL_ROOT"] ?? FileManager.default.currentDirectoryPath
        return root + "/tests/bytes/corpus.txt"
    }

    func testSwiftReachesEveryVerdictOfTheSharedCorpus() throws {
        let text = try String(contentsOfFile: Self.corpusPath, encoding: .utf8)
        var wrong: [String] = []
        var n = 0
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: "\t", omittingEmptySubsequences: false)
            XCTAssertEqual(parts.count, 3, "malformed corpus line")
            guard parts.count == 3 else { continue }
            let got = Self.verdict(Self.unhex(parts[2]))
            if got != parts[1] {
                wrong.append("\(parts[0]): want \(parts[1]), got \(got)")
            }
            n += 1
        }
        XCTAssertGreaterThan(n, 500, "the corpus has \(n) vectors")
        XCTAssert(wrong.isEmpty, "Swift disagrees with the corpus on \(wrong.count) vectors:\n" + wrong.joined(separator: "\n"))
    }

    /// The read-path cases (tests/bytes/post_read_path.txt): `blog.Post` buffers
    /// as another tool might leave them in a row. Swift's typed decode reaches the
    /// verdict Rust's `db.get` and Kotlin's `decode` reach on every one.
    func testSwiftReachesEveryVerdictOfTheReadPathCorpus() throws {
        let root = ProcessInfo.processInfo.environment["KEEL_ROOT"] ?? FileManager.default.currentDirectoryPath
        let text = try String(contentsOfFile: root + "/tests/bytes/post_read_path.txt", encoding: .utf8)
        var wrong: [String] = []
        var n = 0
        for line in text.split(separator: "\n") where !line.isEmpty && !line.hasPrefix("#") {
            let parts = line.split(separator: "\t", omittingEmptySubsequences: false)
            XCTAssertGreaterThanOrEqual(parts.count, 3, "malformed read-path line")
            guard parts.count >= 3 else { continue }
            let got: String
            do {
                _ = try Post(flatBuffer: Self.unhex(parts[2]))
                got = "accept"
            } catch KeelError.InvalidObject(_) {
                got = "reject"
            } catch {
                got = "other(\(error))"
            }
            if got != parts[1] {
                wrong.append("\(parts[0]): want \(parts[1]), got \(got)")
            }
            n += 1
        }
        XCTAssertGreaterThanOrEqual(n, 20, "the read-path corpus has \(n) cases")
        XCTAssert(wrong.isEmpty, "Swift disagrees on \(wrong.count) read-path cases:\n" + wrong.joined(separator: "\n"))
    }

    func testNegativeZeroInAZeroDefaultFloatSurvivesEncoding() throws {
        let r = Root(id: "z", f: -0.0, d: -0.0)
        let back = try Root(flatBuffer: r.flatBuffer())
        XCTAssertEqual(back.f.bitPattern, (-0.0 as Float).bitPattern)
        XCTAssertEqual(back.d.bitPattern, (-0.0 as Double).bitPattern)
    }

    /// A row changed behind keel's back by a stock SQLite tool (Python's `sqlite3`
    /// module: a plain UPDATE of the row's bytes) reads as the typed
    /// `KeelError.InvalidObject` (the decode error's description as message), as
    /// it does in Rust (`stored_bytes.rs`) and Kotlin.
    func testARowDamagedByStockSQLIsATypedDecodeError() async throws {
        let path = try tempDir().appendingPathComponent("damaged.db").path
        var db = try await Keel.openAsync(path: path, schema: BlogSchema.self, options: fastOptions())
        try await db.write { txn in try txn.insert(Post(id: "d", title: "QQQQ is the title")) }
        try await db.close()
        try Self.damageTitleWithStockSQL(path)
        db = try await Keel.openAsync(path: path, schema: BlogSchema.self, options: fastOptions())
        for e in [expectError(KeelError.self) { _ = try db.get(Post.self, key: "d") },
                  expectError(KeelError.self) { _ = try db.fetch(Post.self).all() }] {
            guard case .InvalidObject(let message)? = e, message.contains("not UTF-8") else {
                return XCTFail("expected InvalidObject naming the bad string, got \(String(describing: e))")
            }
        }
        try await db.close()
    }

    /// Sets the first byte of "QQQQ" in the one `blog.Post` row that holds it to
    /// 0xFF (not UTF-8), with a plain SQL UPDATE from another process.
    static func damageTitleWithStockSQL(_ path: String) throws {
        let script = """
            import sqlite3, sys
            c = sqlite3.connect(sys.argv[1])
            n = 0
            for rowid, body in c.execute('SELECT rowid, body FROM "blog.Post"').fetchall():
                i = body.find(b"QQQQ")
                if i >= 0:
                    b = bytearray(body); b[i] = 0xFF
                    c.execute('UPDATE "blog.Post" SET body = ? WHERE rowid = ?', (bytes(b), rowid)); n += 1
            c.commit()
            sys.exit(0 if n == 1 else 1)
            """
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", "-c", script, path]
        try p.run()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, "the stock-SQL update failed")
    }

    // ---- the corpus's verdict and canonical dump (as in bytes_corpus.rs) ----

    static func verdict(_ bytes: [UInt8]) -> String {
        do {
            return "accept:" + dump(try Root(flatBuffer: bytes))
        } catch KeelError.InvalidObject(let m) {
            // The one error type carries the decode error's words (as Kotlin's does).
            if m.contains("tables nest deeper") { return "reject:too_deep" }
            if m.contains("decode budget") { return "reject:budget" }
            if m.contains("required field") { return "reject:missing_field" }
            return "reject:malformed"
        } catch {
            return "reject:other(\(error))"
        }
    }

    static func unhex(_ s: Substring) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(s.utf8.count / 2)
        var hi: UInt8?
        for c in s.utf8 {
            let v = c <= 57 ? c - 48 : c - 87
            if let h = hi {
                out.append(h << 4 | v)
                hi = nil
            } else {
                hi = v
            }
        }
        return out
    }

    static func q(_ s: String?) -> String {
        guard let s else { return "null" }
        var o = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": o += "\\\""
            case "\\": o += "\\\\"
            case " "..."~": o.unicodeScalars.append(u)
            default: o += "\\u{" + String(u.value, radix: 16) + "}"
            }
        }
        return o + "\""
    }

    static func bits<T: BinaryInteger>(_ v: T, _ digits: Int) -> String {
        let h = String(v, radix: 16)
        return String(repeating: "0", count: max(0, digits - h.count)) + h
    }

    static func leaf(_ l: Leaf) -> String { "{name=\(q(l.name));n=\(l.n)}" }

    static func member(_ i: Item) -> String {
        switch i {
        case .leaf(let l): return "Leaf" + leaf(l)
        case .other(let o): return "Other{x=\(o.x)}"
        case .unknown(let tag): return "unknown(\(tag))"
        }
    }

    static func node(_ n: Node?) -> String {
        guard let n else { return "null" }
        return "{left=\(node(n.left));right=\(node(n.right))}"
    }

    static func dump(_ r: Root) -> String {
        var o = "id=\(q(r.id))"
        o += ";f=\(bits(r.f.bitPattern, 8));d=\(bits(r.d.bitPattern, 16))"
        o += ";n=\(r.n);big=\(r.big);name=\(q(r.name))"
        o += ";tags=[\(r.tags.map { q($0) }.joined(separator: ","))]"
        o += ";nums=[\(r.nums.map { String($0) }.joined(separator: ","))]"
        o += ";leaf=\(r.leaf.map(leaf) ?? "null")"
        o += ";item=\(r.item.map(member) ?? "none")"
        o += ";items=[\(r.items.map(member).joined(separator: ","))]"
        o += ";node=\(node(r.node))"
        o += ";leaves=[\(r.leaves.map(leaf).joined(separator: ","))]"
        return o
    }
}
