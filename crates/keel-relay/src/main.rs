//! The `keel-relay` command: run the sync relay, or print and check the PostgreSQL
//! schema of a `.fbs` file's synced collections.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use keel_relay::config::{Config, LogFormat};
use keel_relay::error::Error;
use keel_relay::sync_schema::SyncSchema;
use keel_relay::{ddl, server};

/// The keel sync relay: syncs keel clients with the app's own PostgreSQL.
#[derive(Parser)]
#[command(name = "keel-relay", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the relay (until interrupted).
    Serve {
        /// The TOML config file (see docs/sync.md).
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
    },
    /// Print the PostgreSQL DDL of the schema's synced collections, or check a live
    /// database against it (exit status 1 when they differ).
    Schema {
        /// The `.fbs` file.
        file: PathBuf,
        /// Check the database at this connection string instead of printing DDL.
        #[arg(long, value_name = "URL")]
        check: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("keel-relay: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Error> {
    match cli.command {
        Command::Serve { config } => {
            let config = Config::from_file(&config)?;
            init_logging(config.log_format);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(Error::Serve)?;
            runtime.block_on(async {
                let mut relay = server::start(config).await?;
                tokio::select! {
                    () = relay.wait() => {}
                    _ = tokio::signal::ctrl_c() => {
                        tracing::info!("interrupted; stopping");
                        relay.stop().await;
                    }
                }
                Ok::<_, Error>(())
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Schema { file, check } => {
            let schema = SyncSchema::from_file(&file)?;
            let Some(url) = check else {
                print!("{}", ddl::ddl(&schema));
                return Ok(ExitCode::SUCCESS);
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(Error::Serve)?;
            let differences = runtime.block_on(async {
                let (client, connection) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
                tokio::spawn(connection);
                ddl::check(&client, &schema).await
            })?;
            if differences.is_empty() {
                println!(
                    "ok: {} synced collection(s) match the database",
                    schema.collections.len()
                );
                Ok(ExitCode::SUCCESS)
            } else {
                println!("{} difference(s):", differences.len());
                for d in &differences {
                    println!("  {d}");
                }
                Ok(ExitCode::from(1))
            }
        }
    }
}

/// Structured logs on stderr: human-readable lines, or one JSON object per line.
fn init_logging(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
