// An Android splash screen that opens keel without blocking the main thread and
// shows the open's progress.
//
// AAR: `cargo xtask aar` (see docs/bindings.md) → target/keel-aar/keel.aar. Add it
// plus `net.java.dev.jna:jna:5.15.0@aar` and kotlinx-coroutines-android.

package com.example.app

import android.os.Bundle
import android.widget.ProgressBar
import android.widget.TextView
import androidx.appcompat.app.AppCompatActivity
import androidx.lifecycle.lifecycleScope
import dev.keel.Keel
import dev.keel.updates
import dev.keel.ffi.Database
import dev.keel.ffi.Expr
import dev.keel.ffi.KeelException
import dev.keel.ffi.OpenOptions
import dev.keel.ffi.Value
import kotlinx.coroutines.launch
import java.io.File

class SplashActivity : AppCompatActivity() {
    private lateinit var bar: ProgressBar
    private lateinit var label: TextView

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        setContentView(R.layout.splash)
        bar = findViewById(R.id.progress)
        label = findViewById(R.id.label)

        val schema = assets.open("post.fbs").bufferedReader().readText()
        val path = File(filesDir, "app.keel").path

        lifecycleScope.launch { // Dispatchers.Main: the UI thread stays free throughout
            // Returns at once; the open (including a slow WAL sync) runs on keel's threads.
            val opening = Keel.open(path, schema, OpenOptions(), scope = this)
            // keel calls its progress listener on a keel thread; the Flow hands each
            // event to this coroutine, on the main thread.
            opening.progress.collect { p ->
                bar.progress = (p.fraction * 100).toInt()
                label.text = "Opening… ${p.phase.name.lowercase()}"
            }
            try {
                val db = opening.database.await()
                showPosts(db)
            } catch (e: KeelException) {
                // Typed: KeelException.Corrupt, .InvalidSchema, .Io, … with a readable message.
                label.text = "Could not open the database: ${e.message}"
            }
        }
    }

    private fun showPosts(db: Database) {
        val query = db.query("blog.Post")
            .filter(Expr.ge("priority", Value.Integer(1)))
            .orderBy("priority", true)
            .limit(100uL)
        lifecycleScope.launch {
            // The current result, then every change (with a row-level diff for
            // RecyclerView animations). Cancelled with the lifecycle.
            query.updates().collect { update ->
                label.text = "${update.objects.size} posts"
                // adapter.submit(update.objects.map { Post.getRootAsPost(ByteBuffer.wrap(it.bytes)) })
            }
        }
    }

    override fun onStop() {
        super.onStop()
        // Going to the background: empty the WAL so the next launch has nothing to sync.
        // lifecycleScope.launch { db.onBackground() }
    }
}
