//! `tet-host`: inspect and verify `.tet` files.
//!
//! Exit codes follow the fsck convention: 0 clean, 4 problems found and left, 8
//! operational error (cannot open or read), 16 usage error.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tet_host::{input, tet_cmd, Exit, Output};

#[derive(Parser)]
#[command(name = "tet-host", version, about = "Inspect and verify .tet files")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the superblock, datasets, execution settings and footer.
    Info {
        /// The file.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check every structural rule; exit 0 when clean, 4 when problems are found.
    Verify {
        /// The file.
        file: PathBuf,
        /// Print JSON.
        #[arg(long, conflicts_with = "quiet")]
        json: bool,
        /// Print one line.
        #[arg(short, long)]
        quiet: bool,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Clean
            };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let exit = match cli.command {
        Command::Info { file, json } => with_input(&file, |b| {
            tet_cmd::info(&file, b, if json { Output::Json } else { Output::Human })
        }),
        Command::Verify { file, json, quiet } => with_input(&file, |b| {
            let out = match (json, quiet) {
                (true, _) => Output::Json,
                (_, true) => Output::Quiet,
                _ => Output::Human,
            };
            tet_cmd::verify(&file, b, out)
        }),
    };
    ExitCode::from(exit as u8)
}

fn with_input(path: &std::path::Path, f: impl FnOnce(&[u8]) -> Exit) -> Exit {
    match input::Input::open(path) {
        Ok(i) => f(i.bytes()),
        Err(e) => {
            eprintln!("tet-host: cannot read {}: {e}", path.display());
            Exit::Operational
        }
    }
}
