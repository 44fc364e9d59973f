//! `tet-host`: inspect and verify `.tet` files.
//!
//! Exit codes follow the fsck convention: 0 clean, 1 problems found and all corrected,
//! 4 problems found and left, 8 operational error (cannot open or read), 16 usage error.

// The library's lint wall holds here too: arguments come from a command line.
#![deny(
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tet_host::{
    cetrafs_cmd, detect, device, input, mkfs, query_cmd, tet_cmd, tet_repair, Exit, Format, Output,
};

#[derive(Parser)]
#[command(
    name = "tet-host",
    version,
    about = "Inspect and verify .tet files and cetrafs images"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How payloads are read (.tet).
#[derive(clap::Args, Clone, Copy)]
struct ReadArgs {
    /// Decode every chunk, not only the first 128 (.tet).
    #[arg(long)]
    deep: bool,
    /// Threads for decoding (default: one per core).
    #[arg(short = 'j', long = "jobs", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
    /// Memory budget for decoding, e.g. 512M (default: the file's TIDX execution
    /// settings, 25 % of RAM when they are 0).
    #[arg(long, value_parser = mkfs::parse_size)]
    memory_budget: Option<u64>,
    /// Read the file into memory instead of mapping it. Use on filesystems where
    /// mapping is unsafe (network filesystems, files another process may truncate:
    /// a mapped file that shrinks kills the process with SIGBUS). Costs the file's
    /// size in memory.
    #[arg(long)]
    no_mmap: bool,
}

impl ReadArgs {
    fn decode(self) -> tet_cmd::DecodeOptions {
        tet_cmd::DecodeOptions {
            deep: self.deep,
            threads: self.jobs.map(usize::from),
            budget: self.memory_budget,
            progress: self.deep,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Show the superblock, datasets, execution settings and footer (.tet), or the
    /// superblock, region map, groups, nodes and journal states (cetrafs).
    Info {
        /// The file or image.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a cetrafs image (deterministic), optionally populated from a directory.
    Mkfs {
        /// The image: a file (written sparse, replaced atomically) or a block device
        /// (written in place).
        image: PathBuf,
        /// Image size, e.g. 64M or 2T (required for a file; a block device's size by
        /// default). Block group size and inode count scale with it unless given.
        #[arg(long, value_parser = mkfs::parse_size)]
        size: Option<u64>,
        /// Block group size, e.g. 16M.
        #[arg(long, value_parser = mkfs::parse_size)]
        block_group_size: Option<u64>,
        /// Zone groups.
        #[arg(long)]
        zone_groups: Option<u32>,
        /// Node registry capacity.
        #[arg(long)]
        nodes: Option<u32>,
        /// Inode table length.
        #[arg(long)]
        inodes: Option<u64>,
        /// Volume label.
        #[arg(long)]
        label: Option<String>,
        /// Copy this directory's files, directories, symlinks and xattrs in.
        #[arg(long)]
        from: Option<PathBuf>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Replay the journals of a cetrafs image (only that: like e2fsck -E journal_only).
    /// Exit 0 nothing to replay, 1 replayed, 4 conflicting slots left, 8 refused.
    Replay {
        /// The image (written in place).
        image: PathBuf,
        /// The id this tool claims journals under (written to replay_owner).
        #[arg(long, default_value_t = u64::MAX, value_parser = clap::value_parser!(u64).range(1..))]
        node_id: u64,
        /// Replay journals of nodes the registry shows ACTIVE, or that another replayer
        /// has claimed.
        #[arg(long)]
        force: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a directory of a cetrafs image.
    Ls {
        /// The image.
        image: PathBuf,
        /// Path inside the image.
        #[arg(default_value = "/")]
        path: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Show the raw on-disk state, ignoring committed journal transactions that
        /// are not replayed yet (by default they are read as a mount would).
        #[arg(long)]
        no_journal: bool,
    },
    /// Write a file of a cetrafs image to standard output.
    Cat {
        /// The image.
        image: PathBuf,
        /// Path inside the image.
        path: String,
        /// Print a JSON object with the bytes (UTF-8 text, or hex) instead of raw bytes.
        #[arg(long)]
        json: bool,
        /// Show the raw on-disk state, ignoring committed journal transactions that
        /// are not replayed yet (by default they are read as a mount would).
        #[arg(long)]
        no_journal: bool,
    },
    /// Show an inode of a cetrafs image.
    Stat {
        /// The image.
        image: PathBuf,
        /// Path inside the image.
        path: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Show the raw on-disk state, ignoring committed journal transactions that
        /// are not replayed yet (by default they are read as a mount would).
        #[arg(long)]
        no_journal: bool,
    },
    /// Answer a query document (JSON or TOML: a path, inline text, or - for standard
    /// input) over a .tet file, e.g. '{"dataset": "a", "selection": [{"start": 0,
    /// "stop": 10}], "mean": []}'. Prints JSON unless -q or --format table.
    Query {
        /// The query document, inline text, or - for standard input.
        query: String,
        /// The .tet file.
        #[arg(short = 't', long = "tet")]
        file: PathBuf,
        /// Print one line.
        #[arg(short, long, conflicts_with = "format")]
        quiet: bool,
        /// Output format.
        #[arg(long, value_parser = ["json", "table"], default_value = "json")]
        format: String,
        /// Write a partial result, or the selected values, to this .npy file.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Print only the first N selected values (queries without an operation).
        #[arg(long)]
        preview: Option<usize>,
        /// Print the read plan (chunks, bytes to read and decode) and stop.
        #[arg(long)]
        plan: bool,
        /// Execute the query (the default; accepted for compatibility).
        #[arg(short = 'x', long = "execute")]
        execute: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Convert a NumPy .npy (one dataset) or .npz (one dataset per array) file to .tet.
    Convert {
        /// The .npy or .npz file.
        input: PathBuf,
        /// The .tet file to write (replaced atomically).
        output: PathBuf,
        /// Chunk shape, e.g. 256,256 (default: about 1 MiB per chunk).
        #[arg(long)]
        chunk: Option<String>,
        /// Payload codec.
        #[arg(long, value_parser = ["raw", "zstd"], default_value = "zstd")]
        codec: String,
        /// zstd level (1 ..= 22).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=22))]
        level: i32,
        /// Dataset name for a .npy input (default: the file name without extension).
        #[arg(long)]
        name: Option<String>,
    },
    /// Write a dataset, or a selection of it, to a NumPy .npy file.
    Export {
        /// The .tet file.
        file: PathBuf,
        /// The dataset.
        #[arg(long)]
        dataset: String,
        /// The .npy file to write.
        output: PathBuf,
        /// A selection as JSON, e.g. '[{"start": 0, "stop": 10}]'.
        #[arg(long)]
        selection: Option<String>,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Repair a .tet file: -n reports, -p applies fixes that lose nothing, -y applies
    /// every fix; without one of them it asks per fix on a terminal. Exit 0 nothing to
    /// fix, 1 all corrected, 4 problems left, 8 operational error, 16 usage error.
    Repair {
        /// The file (.tet: replaced atomically unless -o is given; cetrafs: repaired in
        /// place through its journal).
        file: PathBuf,
        /// Report what would be done; change nothing.
        #[arg(short = 'n', conflicts_with_all = ["preen", "yes"])]
        no: bool,
        /// Apply only the fixes that lose nothing.
        #[arg(short = 'p', conflicts_with = "yes")]
        preen: bool,
        /// Apply every fix, including those that lose history or chunk contents.
        #[arg(short = 'y')]
        yes: bool,
        /// Write the repaired file here and leave the original alone.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        /// Replace chunks that cannot be decoded by raw zeros (NaN for floats),
        /// recording each loss in the history footer. Lossy: needs -y or a yes.
        #[arg(long)]
        zero_bad_chunks: bool,
        /// cetrafs: repair although the registry shows nodes ACTIVE (the filesystem may
        /// be mounted), and replay their journals.
        #[arg(long)]
        force: bool,
        /// cetrafs: print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Check every structural rule and decode payloads (.tet: the first 128 chunks, or
    /// all with --deep); exit 0 when clean, 4 when problems are found.
    Verify {
        /// The file.
        file: PathBuf,
        /// Print JSON.
        #[arg(long, conflicts_with = "quiet")]
        json: bool,
        /// Print one line.
        #[arg(short, long)]
        quiet: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Clean
            };
            let _ = e.print();
            return ExitCode::from(code.code());
        }
    };
    let exit = match cli.command {
        Command::Info { file, json } => {
            let out = if json { Output::Json } else { Output::Human };
            match sniff(&file) {
                Err(e) => e,
                Ok(Some(dev)) => cetrafs_cmd::info(&file, &dev, out),
                Ok(None) => with_input(&file, |b| tet_cmd::info(&file, b, out)),
            }
        }
        Command::Mkfs {
            image,
            size,
            block_group_size,
            zone_groups,
            nodes,
            inodes,
            label,
            from,
            json,
        } => {
            let o = mkfs::MkfsOptions {
                size,
                bg_size: block_group_size,
                zone_groups,
                nodes,
                inodes,
                label,
                from: from.as_deref(),
                output: if json { Output::Json } else { Output::Human },
            };
            mkfs::mkfs(&image, &o)
        }
        Command::Replay {
            image,
            node_id,
            force,
            json,
        } => match sniff(&image).map(|d| d.is_some()) {
            Err(e) => e,
            Ok(false) => {
                eprintln!(
                    "tet-host: {}: not a cetrafs image (no CTFS magic); replay reads cetrafs images",
                    image.display()
                );
                Exit::Usage
            }
            Ok(true) => match device::FileDevice::open_rw(&image) {
                Ok(d) => cetrafs_cmd::replay(
                    &image,
                    &d,
                    node_id,
                    force,
                    if json { Output::Json } else { Output::Human },
                ),
                Err(e) => {
                    eprintln!("tet-host: cannot write {}: {e}", image.display());
                    Exit::Operational
                }
            },
        },
        Command::Ls {
            image,
            path,
            json,
            no_journal,
        } => with_device(&image, |d| {
            cetrafs_cmd::ls(
                &image,
                d,
                &path,
                if json { Output::Json } else { Output::Human },
                no_journal,
            )
        }),
        Command::Cat {
            image,
            path,
            json,
            no_journal,
        } => with_device(&image, |d| {
            cetrafs_cmd::cat(
                &image,
                d,
                &path,
                if json { Output::Json } else { Output::Human },
                no_journal,
            )
        }),
        Command::Stat {
            image,
            path,
            json,
            no_journal,
        } => with_device(&image, |d| {
            cetrafs_cmd::stat(
                &image,
                d,
                &path,
                if json { Output::Json } else { Output::Human },
                no_journal,
            )
        }),
        Command::Query {
            query,
            file,
            quiet,
            format,
            output,
            preview,
            plan,
            execute: _,
            read,
        } => {
            let doc = match query_cmd::read_query_arg(&query).and_then(|t| query_cmd::parse_doc(&t))
            {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("tet-host: {e}");
                    return ExitCode::from(Exit::Usage.code());
                }
            };
            let o = query_cmd::QueryOptions {
                style: if quiet {
                    query_cmd::Style::Quiet
                } else if format == "table" {
                    query_cmd::Style::Table
                } else {
                    query_cmd::Style::Json
                },
                plan_only: plan,
                threads: read.jobs.map(usize::from),
                budget: read.memory_budget,
                output,
                preview,
            };
            with_input_mode(&file, read.no_mmap, |b| {
                query_cmd::query(&file, b, &doc, &o)
            })
        }
        Command::Convert {
            input,
            output,
            chunk,
            codec,
            level,
            name,
        } => {
            let chunk = match chunk
                .as_deref()
                .map(tet_host::convert::parse_chunk)
                .transpose()
            {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("tet-host: {e}");
                    return ExitCode::from(Exit::Usage.code());
                }
            };
            tet_host::convert::convert(
                &input,
                &output,
                &tet_host::convert::ConvertOptions {
                    chunk,
                    codec: if codec == "raw" {
                        tet_core::tet::Codec::Raw
                    } else {
                        tet_core::tet::Codec::Zstd
                    },
                    level,
                    name,
                },
            )
        }
        Command::Export {
            file,
            dataset,
            output,
            selection,
            read,
        } => {
            let sel = match selection
                .map(|s| query_cmd::parse_doc(&format!(r#"{{"dataset": "", "selection": {s}}}"#)))
                .transpose()
            {
                Ok(d) => d.map(|d| d.selection).unwrap_or_default(),
                Err(e) => {
                    eprintln!("tet-host: --selection: {e}");
                    return ExitCode::from(Exit::Usage.code());
                }
            };
            with_input_mode(&file, read.no_mmap, |b| {
                tet_host::convert::export(&file, b, &dataset, &sel, &output, read.memory_budget)
            })
        }
        Command::Repair {
            file,
            no,
            preen,
            yes,
            output,
            zero_bad_chunks,
            force,
            json,
            read,
        } => {
            let mode = match (no, preen, yes) {
                (true, _, _) => tet_repair::Mode::No,
                (_, true, _) => tet_repair::Mode::Preen,
                (_, _, true) => tet_repair::Mode::Yes,
                _ => tet_repair::Mode::Ask,
            };
            match sniff(&file) {
                Err(e) => e,
                Ok(Some(_)) => {
                    let out = if json { Output::Json } else { Output::Human };
                    cetrafs_cmd::repair(&file, mode, force, out)
                }
                Ok(None) => with_input_mode(&file, read.no_mmap, |b| {
                    let o = tet_repair::RepairOptions {
                        mode,
                        output: output.as_deref(),
                        zero_bad_chunks,
                        decode: read.decode(),
                    };
                    tet_repair::repair(&file, b, &o)
                }),
            }
        }
        Command::Verify {
            file,
            json,
            quiet,
            read,
        } => {
            let out = match (json, quiet) {
                (true, _) => Output::Json,
                (_, true) => Output::Quiet,
                _ => Output::Human,
            };
            match sniff(&file) {
                Err(e) => e,
                Ok(Some(dev)) => {
                    let limit = read
                        .memory_budget
                        .unwrap_or_else(|| tet_cmd::host_ram() / 4);
                    cetrafs_cmd::verify(&file, &dev, out, limit)
                }
                Ok(None) => with_input_mode(&file, read.no_mmap, |b| {
                    tet_cmd::verify(&file, b, out, &read.decode())
                }),
            }
        }
    };
    ExitCode::from(exit.code())
}

/// Output into a closed pipe (`tet-host info FILE | head -1`) ends the process quietly
/// with status 0, as ripgrep does: Rust ignores SIGPIPE, so a write to a closed standard
/// output fails and `println!` panics; that panic is turned into a clean exit, and any
/// other failure to write standard output (`> /dev/full`) into a message and exit 8.
/// Every other panic keeps the default report.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") {
            if msg.contains("Broken pipe") {
                std::process::exit(0);
            }
            // Any other write error (a full disk, /dev/full): say so, exit 8.
            let why = msg.trim_start_matches("failed printing to stdout: ");
            eprintln!("tet-host: cannot write to standard output: {why}");
            std::process::exit(i32::from(Exit::Operational.code()));
        }
        default(info);
    }));
}

/// Opens `path` as a cetrafs image when it starts with `CTFS` (`Ok(Some)`), or says it
/// is something else (`Ok(None)`: a `.tet` file, or garbage its checks will name).
fn sniff(path: &std::path::Path) -> Result<Option<device::FileDevice>, Exit> {
    let dev = device::FileDevice::open(path).map_err(|e| {
        eprintln!("tet-host: cannot read {}: {e}", path.display());
        Exit::Operational
    })?;
    let mut head = [0u8; 4];
    let n = dev.read_head(&mut head).map_err(|e| {
        eprintln!("tet-host: cannot read {}: {e}", path.display());
        Exit::Operational
    })?;
    let head = head.get(..n).unwrap_or(&[]);
    Ok((detect(head) == Format::Cetrafs).then_some(dev))
}

/// Runs `f` on the cetrafs image at `path`, read with positioned reads.
fn with_device(path: &std::path::Path, f: impl FnOnce(&device::FileDevice) -> Exit) -> Exit {
    match device::FileDevice::open(path) {
        Ok(d) => f(&d),
        Err(e) => {
            eprintln!("tet-host: cannot read {}: {e}", path.display());
            Exit::Operational
        }
    }
}

fn with_input(path: &std::path::Path, f: impl FnOnce(&[u8]) -> Exit) -> Exit {
    with_input_mode(path, false, f)
}

fn with_input_mode(path: &std::path::Path, no_mmap: bool, f: impl FnOnce(&[u8]) -> Exit) -> Exit {
    let opened = if no_mmap {
        input::Input::read(path)
    } else {
        input::Input::open(path)
    };
    match opened {
        Ok(i) => f(i.bytes()),
        Err(e) => {
            eprintln!("tet-host: cannot read {}: {e}", path.display());
            Exit::Operational
        }
    }
}
