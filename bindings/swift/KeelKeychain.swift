// Data keys for encrypted databases on Apple platforms: a Keychain item.
//
// The model. An encrypted database has one random data key (48 bytes: the AES key
// SQLCipher uses and its salt). `KeychainKeyProvider` keeps it as a generic-password
// item, readable after the device's first unlock and never leaving this device
// (`kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly`): a database can open in the
// background (a push, a widget, an extension in the App Group), and the key is in no
// backup. keel asks it once per open, on keel's open thread:
//
// * `.create` (no database yet): the item if one exists (an open that stopped before
//   the database was created), else a new key (`newDataKey()`) stored first, then
//   returned — keel writes nothing before that.
// * `.open`: the item's bytes. No item means the key is gone: a backup restored on
//   another device brings the database back but not a `ThisDeviceOnly` item. The
//   provider throws `KeyError.Lost`, the open fails with `KeelError.KeyLost`, and no
//   new key and no fresh, empty database is made over the old one.
// * Locked (before the first unlock after a reboot), the Keychain answers
//   `errSecInteractionNotAllowed`: `KeyError.Unavailable`, and the open fails with
//   `KeelError.KeyUnavailable` — retry after the unlock.
//
// ```swift
// var options = OpenOptions()
// options.encryption = Encryption(key: .provider(provider: KeychainKeyProvider()), plaintextHeader: true)
// let db = try await Keel.openAsync(path: url.path, schema: AppSchema.self, options: options)
// ```
//
// (`plaintextHeader: true` for a database in an App Group container: see
// docs/encryption.md.)

#if canImport(Security)
import Foundation
import Security

/// keel's `KeyProvider` backed by the Keychain (see the file's header).
public final class KeychainKeyProvider: KeyProvider, Sendable {
    /// The items' `kSecAttrService`.
    public let service: String
    /// The Keychain access group shared with extensions (`kSecAttrAccessGroup`), or
    /// nil for the app's default group.
    public let accessGroup: String?

    /// Items under `service`, one per database file name (`kSecAttrAccount`): the
    /// name, not the path, since an app's container path changes across updates.
    public init(service: String = "dev.keel.data-key", accessGroup: String? = nil) {
        self.service = service
        self.accessGroup = accessGroup
    }

    public func dataKey(database: String, purpose: KeyPurpose) throws -> Data {
        let account = URL(fileURLWithPath: database).lastPathComponent
        let stored = try read(account)
        switch (stored, purpose) {
        case (let key?, _):
            return key
        case (nil, .open):
            throw KeyError.Lost(
                reason: "the database exists but its Keychain item (service \(service), account \(account)) does not: "
                    + "a backup restored on another device, or the item was deleted")
        case (nil, .create):
            return try create(account)
        }
    }

    /// The base query of the item for `account`.
    private func item(_ account: String) -> [String: Any] {
        var q: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: service,
            kSecAttrAccount as String: account,
        ]
        if let accessGroup { q[kSecAttrAccessGroup as String] = accessGroup }
        #if os(macOS)
        // The iOS-style keychain, where the accessibility class applies.
        q[kSecUseDataProtectionKeychain as String] = true
        #endif
        return q
    }

    /// The key stored for `account`, or nil when there is no item.
    private func read(_ account: String) throws -> Data? {
        var q = item(account)
        q[kSecReturnData as String] = true
        q[kSecMatchLimit as String] = kSecMatchLimitOne
        var result: CFTypeRef?
        let status = SecItemCopyMatching(q as CFDictionary, &result)
        switch status {
        case errSecSuccess:
            guard let data = result as? Data, data.count == Self.dataKeyBytes else {
                throw KeyError.Lost(
                    reason: "the Keychain item (service \(service), account \(account)) does not hold a keel data key")
            }
            return data
        case errSecItemNotFound:
            return nil
        default:
            throw Self.unavailable(status, "read the Keychain item")
        }
    }

    /// Stores a new key for `account` and returns the one stored (another opener's,
    /// if it stored first).
    private func create(_ account: String) throws -> Data {
        let key: Data
        do {
            key = Data(try newDataKey())
        } catch {
            throw KeyError.Unavailable(reason: "no random bytes for a new data key: \(error)")
        }
        var q = item(account)
        q[kSecValueData as String] = key
        q[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
        let status = SecItemAdd(q as CFDictionary, nil)
        switch status {
        case errSecSuccess:
            return key
        case errSecDuplicateItem:
            guard let stored = try read(account) else {
                throw KeyError.Unavailable(reason: "the Keychain item for \(account) vanished while it was created")
            }
            return stored
        default:
            throw Self.unavailable(status, "store a new Keychain item")
        }
    }

    /// `errSecInteractionNotAllowed` (locked) and every other failure: not now.
    private static func unavailable(_ status: OSStatus, _ what: String) -> KeyError {
        let text = (SecCopyErrorMessageString(status, nil) as String?) ?? "OSStatus \(status)"
        if status == errSecInteractionNotAllowed {
            return KeyError.Unavailable(reason: "\(what): the device is locked (\(text))")
        }
        return KeyError.Unavailable(reason: "\(what): \(text)")
    }

    /// The FFI's `DATA_KEY_BYTES`: the 32-byte key, then the 16-byte salt.
    private static let dataKeyBytes = 48
}
#endif
