// An Android splash screen that opens keel without blocking the main thread, shows
// the open's progress, then lists posts through keel's typed Kotlin API.
//
// AAR: `cargo xtask aar` (see docs/bindings.md) → target/keel-aar/keel.aar. Add it
// plus `net.java.dev.jna:jna:5.15.0@aar` and kotlinx-coroutines-android.
// Models: `keel codegen kotlin schema/blog.fbs app/src/main/kotlin/` writes
// blog/Blog.kt (data classes Post, Author…, typed handles, BlogSchema.FBS); it needs
// nothing but the AAR — no flatc, no FlatBuffers runtime.

package com.example.app

import android.os.Bundle
import android.widget.ProgressBar
import android.widget.TextView
import androidx.appcompat.app.AppCompatActivity
import androidx.lifecycle.lifecycleScope
import blog.Author
import blog.BlogSchema
import blog.Post
import dev.keel.Keel
import dev.keel.fetch
import dev.keel.write
import dev.keel.ffi.Database
import dev.keel.ffi.KeelException
import dev.keel.ffi.OpenOptions
import kotlinx.coroutines.launch
import java.io.File

class SplashActivity : AppCompatActivity() {
    private lateinit var bar: ProgressBar
    private lateinit var label: TextView
    private var db: Database? = null

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        setContentView(R.layout.splash)
        bar = findViewById(R.id.progress)
        label = findViewById(R.id.label)

        val path = File(filesDir, "app.keel").path

        lifecycleScope.launch { // Dispatchers.Main: the UI thread stays free throughout
            // Returns at once; the open (including a slow WAL sync) runs on keel's threads.
            val opening = Keel.open(path, BlogSchema.FBS, OpenOptions(), scope = this)
            // keel calls its progress listener on a keel thread; the Flow hands each
            // event to this coroutine, on the main thread.
            opening.progress.collect { p ->
                bar.progress = (p.fraction * 100).toInt()
                label.text = "Opening… ${p.phase.name.lowercase()}"
            }
            try {
                val db = opening.database.await().also { db = it }
                if (db.fetch(Post).count() == 0L) {
                    // One transaction, on keel's writer thread; suspends until COMMIT.
                    db.write {
                        insert(Post(id = "welcome", priority = 10, title = "Welcome", author = Author(name = "Ada")))
                        insert(Post(id = "draft", priority = 0))
                    }
                }
                showPosts(db)
            } catch (e: KeelException) {
                // Typed: KeelException.Corrupt, .InvalidSchema, .AlreadyExists, … with a readable message.
                label.text = "Could not open the database: ${e.message}"
            }
        }
    }

    private fun showPosts(db: Database) {
        // Checked by the compiler: `Post.title ge 2` would not compile.
        val query = db.fetch(Post)
            .where((Post.priority ge 1) and Post.title.isNotNull())
            .orderBy(Post.priority.desc())
            .limit(100)
        lifecycleScope.launch {
            // The current result, then every change, as List<Post> with a row-level
            // diff for RecyclerView animations. Cancelled with the lifecycle.
            query.updates().collect { update ->
                label.text = "${update.objects.size} posts, first: ${update.objects.firstOrNull()?.title}"
                // adapter.submit(update.objects, update.diff)
            }
        }
    }

    override fun onStop() {
        super.onStop()
        // Going to the background: empty the WAL so the next launch has nothing to sync.
        db?.let { lifecycleScope.launch { it.onBackground() } }
    }
}
