// Encrypted databases from Swift: a Swift `KeyProvider` gives the data key through
// the FFI, each of the five key errors is its own `KeelError` case, and none changes
// any file (compared byte for byte). The Keychain provider itself needs Security
// (Apple platforms); these run wherever the suite does.

import Foundation
import Keel
import XCTest

let keySchema = """
namespace demo;
table Post { id: string (primary); title: string; }
root_type Post;
"""

/// An app's key store: makes a key on `.create`, returns it on `.open`; can be locked.
final class MemoryKeys: KeyProvider, @unchecked Sendable {
    private let lock = NSLock()
    private var key: Data?
    private var isLocked = false
    private(set) var purposes: [KeyPurpose] = []

    init(key: Data? = nil) { self.key = key }

    func setLocked(_ on: Bool) { lock.lock(); isLocked = on; lock.unlock() }

    func dataKey(database: String, purpose: KeyPurpose) throws -> Data {
        lock.lock()
        defer { lock.unlock() }
        purposes.append(purpose)
        if isLocked { throw KeyError.Unavailable(reason: "device locked") }
        if let key { return key }
        switch purpose {
        case .create:
            let k = try newDataKey()
            key = k
            return k
        case .open:
            throw KeyError.Lost(reason: "no key item for an existing database")
        }
    }
}

/// Every file in `dir` with its bytes.
func snapshot(_ dir: URL) throws -> [String: Data] {
    var out: [String: Data] = [:]
    for name in try FileManager.default.contentsOfDirectory(atPath: dir.path) {
        let url = dir.appendingPathComponent(name)
        var isDir: ObjCBool = false
        if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDir), !isDir.boolValue {
            out[name] = try Data(contentsOf: url)
        }
    }
    return out
}

func keyed(_ provider: KeyProvider, plaintextHeader: Bool = false) -> OpenOptions {
    var o = fastOptions()
    o.encryption = Encryption(key: .provider(provider: provider), plaintextHeader: plaintextHeader)
    return o
}

final class KeyTests: XCTestCase {
    func encryptedDatabase(_ dir: URL, _ keys: MemoryKeys) async throws -> String {
        let path = dir.appendingPathComponent("enc.db").path
        let db = try await Keel.openAsync(path: path, schema: keySchema, options: keyed(keys))
        let bytes = try db.encodeJson(collection: "demo.Post", json: #"{"id": "p1", "title": "keel-swift-secret"}"#)
        _ = try await db.write(ops: [.insert(collection: "demo.Post", bytes: bytes)])
        try await db.close()
        return path
    }

    func testEachKeyErrorIsItsOwnCaseAndChangesNoFile() async throws {
        let dir = try tempDir()
        let keys = MemoryKeys()
        let path = try await encryptedDatabase(dir, keys)
        for data in try snapshot(dir).values {
            XCTAssertNil(data.range(of: Data("keel-swift-secret".utf8)), "plaintext on disk")
        }
        let before = try snapshot(dir)

        keys.setLocked(true)
        let unavailable = await expectErrorAsync(KeelError.self) {
            _ = try await Keel.openAsync(path: path, schema: keySchema, options: keyed(keys))
        }
        guard case .KeyUnavailable? = unavailable else { return XCTFail("\(String(describing: unavailable))") }
        XCTAssertEqual(try snapshot(dir), before)
        keys.setLocked(false)

        let lost = await expectErrorAsync(KeelError.self) {
            _ = try await Keel.openAsync(path: path, schema: keySchema, options: keyed(MemoryKeys()))
        }
        guard case .KeyLost? = lost else { return XCTFail("\(String(describing: lost))") }
        XCTAssertEqual(try snapshot(dir), before)

        let other = MemoryKeys(key: try newDataKey())
        let wrong = await expectErrorAsync(KeelError.self) {
            _ = try await Keel.openAsync(path: path, schema: keySchema, options: keyed(other))
        }
        guard case .WrongKey? = wrong else { return XCTFail("\(String(describing: wrong))") }
        XCTAssertEqual(try snapshot(dir), before)

        // No key at all, on the shared-container layout (the plaintext header says
        // the file is encrypted): KeyRequired, and recoverCorrupt leaves it alone.
        let headedDir = try tempDir()
        let headed = headedDir.appendingPathComponent("headed.db").path
        let headedDb = try await Keel.openAsync(path: headed, schema: keySchema, options: keyed(keys, plaintextHeader: true))
        try await headedDb.close()
        let headedBefore = try snapshot(headedDir)
        var noKey = fastOptions()
        noKey.recoverCorrupt = true
        let withoutKey = noKey
        let required = await expectErrorAsync(KeelError.self) {
            _ = try await Keel.openAsync(path: headed, schema: keySchema, options: withoutKey)
        }
        guard case .KeyRequired? = required else { return XCTFail("\(String(describing: required))") }
        XCTAssertEqual(try snapshot(headedDir), headedBefore)

        let plainDir = try tempDir()
        let plain = plainDir.appendingPathComponent("plain.db").path
        let db = try await Keel.openAsync(path: plain, schema: keySchema, options: fastOptions())
        try await db.close()
        let plainBefore = try snapshot(plainDir)
        let notEncrypted = await expectErrorAsync(KeelError.self) {
            _ = try await Keel.openAsync(path: plain, schema: keySchema, options: keyed(other))
        }
        guard case .NotEncrypted? = notEncrypted else { return XCTFail("\(String(describing: notEncrypted))") }
        XCTAssertEqual(try snapshot(plainDir), plainBefore)

        // The right key still opens everything, once per open.
        let again = try await Keel.openAsync(path: path, schema: keySchema, options: keyed(keys))
        XCTAssertEqual(try again.count(collection: "demo.Post"), 1)
        try await again.close()
        XCTAssertEqual(keys.purposes.first, .create)
        XCTAssertEqual(keys.purposes.last, .open)
    }
}
