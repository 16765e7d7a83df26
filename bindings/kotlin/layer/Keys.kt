// Data keys for encrypted databases on Android: a Keystore-wrapped data key.
//
// The model. An encrypted database has one random data key (48 bytes: the AES key
// SQLCipher uses and its salt). Android's Keystore cannot hand out key bytes, and
// its keys never leave the device, so the data key is kept *wrapped*: encrypted with
// AES-256-GCM under a Keystore key, in a small file next to the database
// (`<database>.wrapped-key`). At open, keel asks the provider once; it reads the
// file and unwraps it with the Keystore key. For a new database it makes a data
// key, wraps it and stores the file durably before keel creates anything.
//
// The Auto Backup rule. Auto Backup copies the app's files — the database and the
// wrapped key — but never a Keystore key. Restored on a new device (or after a
// reinstall), the wrapped key is back and the key that unwraps it is not: its data
// cannot be read. The provider then throws `KeyException.Lost`, the open fails with
// `KeelException.KeyLost`, and nothing is created in its place: keel never makes a
// fresh, empty database over restored data, and the provider makes a new key only
// when no database exists. Exclude the database and its wrapped key from backups
// (`android:fullBackupContent` / `dataExtractionRules`), or sync the data instead.
//
// The core is platform-free: `WrappedKeyProvider` over any `WrappingKeys`, tested on
// the JVM with a software `java.security.KeyStore` (`KeyStoreWrappingKeys`); on
// Android, `AndroidKeystoreWrappingKeys` keeps the wrapping key in the
// `AndroidKeyStore` provider.
//
// Rotation. `db.rotateKey(to) { progress -> ... }` moves an open database to the
// key `to` gives (or to plaintext with `null`), on keel's threads: a suspend fun
// whose progress arrives in the callback on the rotation's thread. The database
// stays open; writes made meanwhile land in the new file.
package dev.keel

import dev.keel.ffi.Database
import dev.keel.ffi.Encryption
import dev.keel.ffi.KeyException
import dev.keel.ffi.KeyProvider
import dev.keel.ffi.KeyPurpose
import dev.keel.ffi.RotateProgress
import dev.keel.ffi.RotateProgressListener
import dev.keel.ffi.RotateReport
import dev.keel.ffi.newDataKey
import java.io.File
import java.io.FileOutputStream
import java.io.IOException
import java.nio.channels.FileChannel
import java.nio.file.Files
import java.nio.file.StandardCopyOption
import java.nio.file.StandardOpenOption
import java.security.KeyStore
import java.security.spec.AlgorithmParameterSpec
import javax.crypto.AEADBadTagException
import javax.crypto.Cipher
import javax.crypto.KeyGenerator
import javax.crypto.SecretKey
import javax.crypto.spec.GCMParameterSpec

/**
 * Move this open database to the key [to] gives (`null`: plaintext, an export),
 * calling [onProgress] with each step on keel's rotation thread. Suspends until
 * the new file is the database; throws the typed `KeelException` (`Locked` when
 * another process has the file open) and then the old key stays.
 */
suspend fun Database.rotateKey(to: Encryption?, onProgress: (RotateProgress) -> Unit): RotateReport =
    rotateKey(to, object : RotateProgressListener {
        override fun onProgress(progress: RotateProgress) = onProgress(progress)
    })

/** Where the key that wraps data keys lives: one alias of a key store. */
interface WrappingKeys {
    /**
     * The wrapping key under [alias], or null when the key store has none. Throws
     * when the key store cannot be read now (not ready, locked).
     */
    fun get(alias: String): SecretKey?

    /** Make and keep a new AES-256 wrapping key under [alias]. */
    fun create(alias: String): SecretKey
}

/**
 * A `java.security.KeyStore` holding the wrapping key as a secret-key entry
 * protected by [password]: for the JVM (PKCS12, JCEKS) and for tests. The caller
 * owns the key store (loading it, saving it where it must persist).
 */
class KeyStoreWrappingKeys(
    private val keyStore: KeyStore,
    private val password: CharArray,
) : WrappingKeys {
    override fun get(alias: String): SecretKey? = keyStore.getKey(alias, password) as SecretKey?

    override fun create(alias: String): SecretKey {
        val key = KeyGenerator.getInstance("AES").apply { init(256) }.generateKey()
        keyStore.setEntry(alias, KeyStore.SecretKeyEntry(key), KeyStore.PasswordProtection(password))
        return key
    }
}

/**
 * The wrapping key in Android's `AndroidKeyStore`: AES-256-GCM, usable without
 * user authentication (a database opens in the background too), never exported
 * and never backed up.
 */
class AndroidKeystoreWrappingKeys : WrappingKeys {
    private val keyStore: KeyStore by lazy { KeyStore.getInstance(PROVIDER).apply { load(null) } }

    override fun get(alias: String): SecretKey? = keyStore.getKey(alias, null) as SecretKey?

    override fun create(alias: String): SecretKey {
        val generator = KeyGenerator.getInstance("AES", PROVIDER)
        generator.init(spec(alias))
        return generator.generateKey()
    }

    /**
     * `KeyGenParameterSpec.Builder(alias, PURPOSE_ENCRYPT or PURPOSE_DECRYPT)
     * .setBlockModes(BLOCK_MODE_GCM).setEncryptionPaddings(ENCRYPTION_PADDING_NONE)
     * .setKeySize(256).build()`, through reflection: the AAR's classes compile
     * against the JVM, which has no `android.security`.
     */
    private fun spec(alias: String): AlgorithmParameterSpec {
        val builder = Class.forName("android.security.keystore.KeyGenParameterSpec\$Builder")
        val purposeEncryptOrDecrypt = 1 or 2
        val b = builder.getConstructor(String::class.java, Int::class.javaPrimitiveType)
            .newInstance(alias, purposeEncryptOrDecrypt)
        builder.getMethod("setBlockModes", Array<String>::class.java).invoke(b, arrayOf("GCM"))
        builder.getMethod("setEncryptionPaddings", Array<String>::class.java).invoke(b, arrayOf("NoPadding"))
        builder.getMethod("setKeySize", Int::class.javaPrimitiveType).invoke(b, 256)
        return builder.getMethod("build").invoke(b) as AlgorithmParameterSpec
    }

    private companion object {
        const val PROVIDER = "AndroidKeyStore"
    }
}

/**
 * keel's [KeyProvider] for Android: the data key wrapped by a Keystore key ([keys],
 * under [alias]) in `<database>.wrapped-key`. Pass it as
 * `OpenOptions(encryption = Encryption(KeySource.Provider(provider)))`.
 *
 * - OPEN: no wrapped key, no Keystore key (a backup restored to another device),
 *   or a wrapped key the Keystore key does not open → `KeyException.Lost`; never a
 *   new key. The Keystore not readable now → `KeyException.Unavailable` (retry).
 * - CREATE (no database yet): reuses a wrapped key it can open (one stored by an
 *   open that stopped before the database existed); otherwise makes a data key,
 *   wraps it and stores the file (written, synced, moved into place, directory
 *   synced) before returning. No data exists under a leftover it cannot open, so
 *   that one is replaced.
 *
 * Called by keel on its open thread, never the caller's.
 */
class WrappedKeyProvider(
    private val keys: WrappingKeys,
    private val alias: String = DEFAULT_ALIAS,
) : KeyProvider {
    override fun dataKey(database: String, purpose: KeyPurpose): ByteArray {
        val file = wrappedKeyFile(database)
        return when (purpose) {
            KeyPurpose.OPEN -> open(file)
            KeyPurpose.CREATE -> create(file)
        }
    }

    private fun open(file: File): ByteArray {
        val wrapped = read(file)
            ?: throw KeyException.Lost("the database exists but its wrapped key ${file.path} does not")
        val key = wrappingKey()
            ?: throw KeyException.Lost(
                "the Keystore key \"$alias\" that wraps ${file.path} is gone " +
                    "(a backup restored without it: Keystore keys never leave the device)",
            )
        return unwrap(key, wrapped, file)
    }

    private fun create(file: File): ByteArray {
        read(file)?.let { wrapped ->
            val key = wrappingKey()
            if (key != null) {
                try {
                    return unwrap(key, wrapped, file)
                } catch (e: KeyException.Lost) {
                    // Not ours to open, and no database exists under it: replaced below.
                }
            }
        }
        val key = wrappingKey() ?: guard("create the Keystore key \"$alias\"") { keys.create(alias) }
        val dataKey = newDataKey()
        write(file, wrap(key, dataKey))
        return dataKey
    }

    private fun wrappingKey(): SecretKey? = guard("read the Keystore key \"$alias\"") { keys.get(alias) }

    private fun read(file: File): ByteArray? = try {
        file.readBytes()
    } catch (e: java.io.FileNotFoundException) {
        if (file.exists()) throw KeyException.Unavailable("cannot read ${file.path}: $e") else null
    } catch (e: IOException) {
        throw KeyException.Unavailable("cannot read ${file.path}: $e")
    }

    private fun wrap(key: SecretKey, dataKey: ByteArray): ByteArray = guard("wrap the data key") {
        // The key store picks the IV: AndroidKeyStore refuses a caller's own.
        val c = Cipher.getInstance(TRANSFORMATION)
        c.init(Cipher.ENCRYPT_MODE, key)
        c.updateAAD(MAGIC)
        val iv = c.iv
        MAGIC + byteArrayOf(iv.size.toByte()) + iv + c.doFinal(dataKey)
    }

    private fun unwrap(key: SecretKey, wrapped: ByteArray, file: File): ByteArray {
        val ivLen = if (wrapped.size > MAGIC.size) wrapped[MAGIC.size].toInt() and 0xff else -1
        val body = MAGIC.size + 1 + ivLen
        if (ivLen <= 0 || wrapped.size <= body || !wrapped.copyOfRange(0, MAGIC.size).contentEquals(MAGIC)) {
            throw KeyException.Lost("${file.path} is not a keel wrapped key")
        }
        val plain = try {
            guard("unwrap ${file.path}") {
                val c = Cipher.getInstance(TRANSFORMATION)
                c.init(Cipher.DECRYPT_MODE, key, GCMParameterSpec(TAG_BITS, wrapped, MAGIC.size + 1, ivLen))
                c.updateAAD(MAGIC)
                c.doFinal(wrapped, body, wrapped.size - body)
            }
        } catch (e: BadWrap) {
            throw KeyException.Lost(
                "${file.path} does not unwrap with the Keystore key \"$alias\" (it was made under another)",
            )
        }
        if (plain.size != DATA_KEY_SIZE) {
            plain.fill(0)
            throw KeyException.Lost("${file.path} holds ${plain.size} bytes, not a keel data key")
        }
        return plain
    }

    /** Stores [bytes] at [file] so that a crash leaves the old file or the new one. */
    private fun write(file: File, bytes: ByteArray) {
        try {
            val tmp = File(file.path + ".tmp")
            FileOutputStream(tmp).use { out ->
                out.write(bytes)
                out.fd.sync()
            }
            Files.move(tmp.toPath(), file.toPath(), StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING)
            val dir = file.absoluteFile.parentFile.toPath()
            FileChannel.open(dir, StandardOpenOption.READ).use { it.force(true) }
        } catch (e: IOException) {
            throw KeyException.Unavailable("cannot store the wrapped key ${file.path}: $e")
        }
    }

    /**
     * Runs a key store or cipher call: a tag that does not verify is [BadWrap]; a
     * key Android invalidated for good is lost; anything else means "not now".
     */
    private inline fun <T> guard(what: String, f: () -> T): T = try {
        f()
    } catch (e: KeyException) {
        throw e
    } catch (e: AEADBadTagException) {
        throw BadWrap()
    } catch (e: Exception) {
        if (e.javaClass.name == "android.security.keystore.KeyPermanentlyInvalidatedException") {
            throw KeyException.Lost("$what: the Keystore key \"$alias\" was invalidated: $e")
        }
        throw KeyException.Unavailable("$what: $e")
    }

    private class BadWrap : Exception()

    companion object {
        /** The Keystore alias used unless another is given. */
        const val DEFAULT_ALIAS = "dev.keel.wrapping-key"

        /** Where the wrapped data key of [database] is kept. */
        fun wrappedKeyFile(database: String): File = File("$database.wrapped-key")

        private const val TRANSFORMATION = "AES/GCM/NoPadding"
        private const val TAG_BITS = 128
        private const val DATA_KEY_SIZE = 48
        private val MAGIC = "keel-wrapped-key-1\n".toByteArray()
    }
}
