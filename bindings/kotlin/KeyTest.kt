// Encrypted databases from Kotlin, compiled and run with KeelTest.kt: a Kotlin
// `KeyProvider` gives the data key through the FFI; each of the four key errors is
// its own `KeelException` type and leaves every file byte for byte as it was; and
// the Keystore-wrapped provider (layer/Keys.kt) on a software `java.security.KeyStore`,
// including the Auto Backup rule: a wrapped key restored without its Keystore key is
// `KeyLost`, and no new key is made.

import dev.keel.KeyStoreWrappingKeys
import dev.keel.WrappedKeyProvider
import dev.keel.rotateKey
import dev.keel.ffi.*
import java.io.File
import java.security.KeyStore

/** An app's key store: makes a key on CREATE, returns it on OPEN; can be locked. */
class MemoryKeys(var key: ByteArray? = null) : KeyProvider {
    var locked = false
    val calls = mutableListOf<Pair<KeyPurpose, Thread>>()

    override fun dataKey(database: String, purpose: KeyPurpose): ByteArray {
        synchronized(calls) { calls.add(purpose to Thread.currentThread()) }
        if (locked) throw KeyException.Unavailable("device locked")
        return key ?: when (purpose) {
            KeyPurpose.CREATE -> newDataKey().also { key = it }
            KeyPurpose.OPEN -> throw KeyException.Lost("no key item for an existing database")
        }
    }
}

/** Every file in [dir] (recursively) with its bytes. */
fun snapshot(dir: File): Map<String, List<Byte>> =
    dir.walkTopDown().filter { it.isFile }.associate { it.relativeTo(dir).path to it.readBytes().toList() }

fun keyed(provider: KeyProvider, plaintextHeader: Boolean = false) = OpenOptions(
    commitSync = SyncPolicy.Off,
    encryption = Encryption(KeySource.Provider(provider), plaintextHeader),
)

suspend fun encryptedDb(path: String, options: OpenOptions, title: String = "keel-kt-secret") {
    val db = openAsync(path, SCHEMA, options, null)
    db.write(listOf(WriteOp.Insert("demo.Post", post(db, "p1", title = title))))
    db.closeAsync()
}

fun File.holds(needle: String): Boolean {
    val n = needle.toByteArray()
    return walkTopDown().filter { it.isFile }.any { f ->
        val b = f.readBytes()
        (0..b.size - n.size).any { i -> n.indices.all { b[i + it] == n[it] } }
    }
}

fun softwareKeyStore(): KeyStore = KeyStore.getInstance("PKCS12").apply { load(null, null) }

fun registerKeyTests() {
    test("keys: a Kotlin provider creates and opens on keel's thread; nothing is plaintext") { dir ->
        val path = File(dir, "enc.db").path
        val keys = MemoryKeys()
        encryptedDb(path, keyed(keys))
        check(!dir.holds("keel-kt-secret")) { "plaintext on disk" }
        val db = openAsync(path, SCHEMA, keyed(keys), null)
        check(db.count("demo.Post") == 1uL)
        db.closeAsync()
        check(keys.calls.map { it.first } == listOf(KeyPurpose.CREATE, KeyPurpose.OPEN)) { "${keys.calls}" }
        val caller = Thread.currentThread()
        check(keys.calls.none { it.second === caller }) { "the key was asked for on the caller's thread" }
        // keel's open thread, attached to the JVM once and kept (KeelThreads).
        check(keys.calls.all { it.second.name == "keel" && it.second.isDaemon }) {
            "${keys.calls.map { "${it.second.name} daemon=${it.second.isDaemon}" }}"
        }
    }

    test("keys: each key error is its own exception and changes no file") { dir ->
        val path = File(dir, "enc.db").path
        val keys = MemoryKeys()
        encryptedDb(path, keyed(keys))
        val before = snapshot(dir)
        fun unchanged() = check(snapshot(dir) == before) { "a key error changed the files" }
        fun KeelException.notSqlite() =
            check(!message.orEmpty().contains("not a database")) { "SQLite's message: $message" }

        keys.locked = true
        expect<KeelException.KeyUnavailable> { openAsync(path, SCHEMA, keyed(keys), null) }.notSqlite()
        unchanged()
        keys.locked = false

        expect<KeelException.KeyLost> { openAsync(path, SCHEMA, keyed(MemoryKeys()), null) }.notSqlite()
        unchanged()

        // A provider that throws something else is "not now", never a new key.
        val broken = object : KeyProvider {
            override fun dataKey(database: String, purpose: KeyPurpose): ByteArray = throw IllegalStateException("provider bug")
        }
        expect<KeelException.KeyUnavailable> { openAsync(path, SCHEMA, keyed(broken), null) }
        unchanged()

        expect<KeelException.WrongKey> { openAsync(path, SCHEMA, keyed(MemoryKeys(newDataKey())), null) }.notSqlite()
        unchanged()
        expect<KeelException.WrongKey> { openAsync(path, SCHEMA, keyed(keys, plaintextHeader = true), null) }
        unchanged()
        // No key at all, on the shared-container layout (the plaintext header says
        // the file is encrypted): KeyRequired, and recoverCorrupt leaves it alone.
        val headed = File(dir, "headed.db").path
        encryptedDb(headed, keyed(keys, plaintextHeader = true))
        val headedBefore = snapshot(dir)
        expect<KeelException.KeyRequired> { openAsync(headed, SCHEMA, OpenOptions(recoverCorrupt = true), null) }.notSqlite()
        check(snapshot(dir) == headedBefore) { "KeyRequired changed the files" }

        val plain = File(dir, "plain.db").path
        val db = openAsync(plain, SCHEMA, OpenOptions(commitSync = SyncPolicy.Off), null)
        db.write(listOf(WriteOp.Insert("demo.Post", post(db, "p"))))
        db.closeAsync()
        val plainBefore = snapshot(dir)
        expect<KeelException.NotEncrypted> { openAsync(plain, SCHEMA, keyed(MemoryKeys(newDataKey())), null) }.notSqlite()
        check(snapshot(dir) == plainBefore) { "NotEncrypted changed the files" }

        // The right key still opens everything.
        val again = openAsync(path, SCHEMA, keyed(keys), null)
        check(again.count("demo.Post") == 1uL)
        again.closeAsync()

        // No database yet and a locked device: nothing is created.
        val fresh = File(dir, "fresh").apply { mkdir() }
        expect<KeelException.KeyUnavailable> {
            openAsync(File(fresh, "new.db").path, SCHEMA, keyed(MemoryKeys().apply { locked = true }), null)
        }
        check(fresh.listFiles()!!.isEmpty()) { "${fresh.listFiles()!!.toList()}" }
    }

    test("keys: an open database rotates to a new key; the old one is WrongKey") { dir ->
        val path = File(dir, "rot.db").path
        val old = MemoryKeys()
        val db = openAsync(path, SCHEMA, keyed(old), null)
        db.write(listOf(WriteOp.Insert("demo.Post", post(db, "p1", title = "keel-kt-rotated"))))
        val new = MemoryKeys()
        val steps = mutableListOf<RotateStep>()
        val report = db.rotateKey(Encryption(KeySource.Provider(new), false)) { p ->
            synchronized(steps) { steps.add(p.step) }
        }
        check(report.from != report.to && report.to.startsWith("salt:")) { "$report" }
        check(synchronized(steps) { steps.first() == RotateStep.LOCK && steps.last() == RotateStep.DONE }) { "$steps" }
        check(new.calls.map { it.first } == listOf(KeyPurpose.CREATE)) { "${new.calls}" }
        // The same handle goes on, on the new file.
        db.write(listOf(WriteOp.Insert("demo.Post", post(db, "p2"))))
        check(db.count("demo.Post") == 2uL)
        db.closeAsync()
        check(!dir.holds("keel-kt-rotated")) { "plaintext on disk" }
        expect<KeelException.WrongKey> { openAsync(path, SCHEMA, keyed(old), null) }
        val again = openAsync(path, SCHEMA, keyed(new), null)
        check(again.count("demo.Post") == 2uL)
        again.closeAsync()
    }

    test("keys: an open plaintext database migrates to encrypted, and a held file is Locked") { dir ->
        val path = File(dir, "plain.db").path
        val plain = OpenOptions(commitSync = SyncPolicy.Off)
        val db = openAsync(path, SCHEMA, plain, null)
        db.write(listOf(WriteOp.Insert("demo.Post", post(db, "p1", title = "keel-kt-migrated"))))
        // Another handle holds the file: refused, and the database goes on plaintext.
        val other = openAsync(path, SCHEMA, plain, null)
        val keys = MemoryKeys()
        expect<KeelException.Locked> { db.rotateKey(Encryption(KeySource.Provider(keys), false), null) }
        other.closeAsync()
        check(db.count("demo.Post") == 1uL)
        db.rotateKey(Encryption(KeySource.Provider(keys), false), null)
        db.write(listOf(WriteOp.Insert("demo.Post", post(db, "p2"))))
        db.closeAsync()
        check(!dir.holds("keel-kt-migrated")) { "plaintext on disk after the migration" }
        // Without a key the file reads as noise (no WAL beside it says more).
        val e = expect<KeelException> { openAsync(path, SCHEMA, plain, null) }
        check(e is KeelException.KeyRequired || e is KeelException.Corrupt) { "$e" }
        val again = openAsync(path, SCHEMA, keyed(keys), null)
        check(again.count("demo.Post") == 2uL)
        again.closeAsync()
    }

    test("keys: a key file and the plaintext header") { dir ->
        val path = File(dir, "h.db").path
        val keyFile = File(dir, "keys/h.key").apply { parentFile.mkdirs() }
        val options = OpenOptions(commitSync = SyncPolicy.Off, encryption = Encryption(KeySource.File(keyFile.path), true))
        encryptedDb(path, options, title = "keel-kt-header")
        check(File(path).readBytes().copyOf(16).contentEquals("SQLite format 3\u0000".toByteArray())) { "header not plaintext" }
        check(!dir.holds("keel-kt-header"))
        val db = openAsync(path, SCHEMA, options, null)
        check(db.count("demo.Post") == 1uL)
        db.closeAsync()
        keyFile.delete()
        val before = snapshot(dir)
        expect<KeelException.KeyLost> { openAsync(path, SCHEMA, options, null) }
        check(snapshot(dir) == before && !keyFile.exists()) { "a lost key file was replaced" }
    }

    test("keys: the Keystore-wrapped data key round-trips and is never stored plain") { dir ->
        val path = File(dir, "w.db").path
        val password = "test".toCharArray()
        val store = softwareKeyStore()
        val provider = WrappedKeyProvider(KeyStoreWrappingKeys(store, password))
        encryptedDb(path, keyed(provider))
        val wrapped = WrappedKeyProvider.wrappedKeyFile(path)
        check(wrapped.exists() && store.containsAlias(WrappedKeyProvider.DEFAULT_ALIAS))
        // The data key itself is nowhere on disk: the wrapped file holds ciphertext.
        val key = provider.dataKey(path, KeyPurpose.OPEN)
        val bytes = wrapped.readBytes()
        check((0..bytes.size - key.size).none { i -> key.indices.all { bytes[i + it] == key[it] } }) { "the data key is stored plain" }
        val db = openAsync(path, SCHEMA, keyed(WrappedKeyProvider(KeyStoreWrappingKeys(store, password))), null)
        check(db.count("demo.Post") == 1uL)
        db.closeAsync()
    }

    test("keys: Auto Backup restores the wrapped key without its Keystore key: KeyLost, no new key") { dir ->
        val device = File(dir, "device").apply { mkdir() }
        val path = File(device, "w.db").path
        val password = "test".toCharArray()
        encryptedDb(path, keyed(WrappedKeyProvider(KeyStoreWrappingKeys(softwareKeyStore(), password))))

        // Restored to a new device: the files came back, the Keystore key did not.
        val restored = File(dir, "restored")
        device.copyRecursively(restored)
        val restoredPath = File(restored, "w.db").path
        val before = snapshot(restored)
        val newDevice = softwareKeyStore()
        val provider = WrappedKeyProvider(KeyStoreWrappingKeys(newDevice, password))
        expect<KeelException.KeyLost> { openAsync(restoredPath, SCHEMA, keyed(provider), null) }
        check(snapshot(restored) == before) { "the restored files changed" }
        check(!newDevice.containsAlias(WrappedKeyProvider.DEFAULT_ALIAS)) { "a new Keystore key was made" }
        // The provider alone refuses the same way.
        expect<KeyException.Lost> { provider.dataKey(restoredPath, KeyPurpose.OPEN) }

        // The database without its wrapped key: lost as well.
        File("$restoredPath.wrapped-key").delete()
        val noWrapped = snapshot(restored)
        expect<KeelException.KeyLost> { openAsync(restoredPath, SCHEMA, keyed(provider), null) }
        check(snapshot(restored) == noWrapped && !File("$restoredPath.wrapped-key").exists())

        // A key store that cannot be read now is "retry later", not lost.
        val notReady = KeyStore.getInstance("PKCS12") // never loaded
        expect<KeelException.KeyUnavailable> {
            openAsync(path, SCHEMA, keyed(WrappedKeyProvider(KeyStoreWrappingKeys(notReady, password))), null)
        }
    }
}
