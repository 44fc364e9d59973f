//! The command line: clap's types for every command and option, and the process setup
//! `main` does before dispatching.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::Exit;

/// The exit-code table of every command (the README's, in `--help`).
pub const EXIT_CODES: &str = "\
Exit codes (every command, both formats):
  0         clean: nothing found, or warnings only
  1         problems found and all corrected (repair, replay)
  4         the input's own damage: errors left in place, or too damaged to read
  8         operational: cannot open, read or write; neither format; a request the
            data cannot satisfy; a memory budget too small; a refusal (a live node)
  16        usage: what was typed is wrong (an option, a query, no -n/-p/-y without a
            terminal, an existing output without --force, an output that is an input)
  130, 143  interrupted by SIGINT or SIGTERM (temporary file removed, target untouched)";

#[derive(Parser)]
#[command(
    name = "tet-host",
    version,
    about = "Inspect, verify, repair and convert .tet files and cetrafs images",
    after_help = EXIT_CODES
)]
pub struct Cli {
    #[command(subcommand)]
    /// The command.
    pub command: Command,
}

/// How payloads are read (.tet).
#[derive(clap::Args, Clone, Copy)]
pub struct ReadArgs {
    /// Threads for decoding (default: one per core).
    #[arg(short = 'j', long = "jobs", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    #[command(flatten)]
    pub memory: MemoryArgs,
}

/// Memory and mapping (.tet).
#[derive(clap::Args, Clone, Copy)]
pub struct MemoryArgs {
    /// Memory budget for decoding: bytes, 512M or 512MiB (2^20), 512MB (10^6), 1.5G,
    /// 1GiB, or 10% of RAM (default: the file's TIDX execution settings, 25 % of RAM when
    /// they are 0).
    #[arg(long, value_parser = crate::budget::parse_budget)]
    pub memory_budget: Option<u64>,
    /// Read the file into memory instead of mapping it. Use on filesystems where
    /// mapping is unsafe (network filesystems, files another process may truncate:
    /// a mapped file that shrinks kills the process with SIGBUS). Costs the file's
    /// size in memory.
    #[arg(long)]
    pub no_mmap: bool,
}

impl ReadArgs {
    /// The decode options these arguments give; `deep` decodes every chunk (with a
    /// progress bar on a terminal).
    pub fn decode(self, deep: bool) -> crate::tet::verify::DecodeOptions {
        crate::tet::verify::DecodeOptions {
            deep,
            threads: self.jobs.map(usize::from),
            budget: self.memory.memory_budget,
        }
    }
}

#[derive(Subcommand)]
pub enum Command {
    /// Show the superblock, datasets, execution settings and footer (.tet), or the
    /// superblock, region map, groups, nodes and journal states (cetrafs).
    Info {
        /// The file or image.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Also print each .tet dataset's axis metadata: dimension names, coordinates
        /// (length, first and last values) and attributes.
        #[arg(long)]
        metadata: bool,
        /// Also print the .tet footer's history rows.
        #[arg(long)]
        history: bool,
    },
    /// Create a cetrafs image (deterministic), optionally populated from a directory.
    Mkfs {
        /// The image: a file (written sparse, replaced atomically) or a block device
        /// (written in place).
        image: PathBuf,
        /// Image size, e.g. 64M or 2T (required for a file; a block device's size by
        /// default). Block group size and inode count scale with it unless given.
        #[arg(long, value_parser = crate::cetrafs::mkfs::parse_size)]
        size: Option<u64>,
        /// Block group size, e.g. 16M.
        #[arg(long, value_parser = crate::cetrafs::mkfs::parse_size)]
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
        /// Format even when the target holds a filesystem, an image, a partition table or
        /// other data (otherwise mkfs asks on a terminal, and refuses without one).
        #[arg(long)]
        force: bool,
        /// The volume UUID (default: a random one). The same options and input with the
        /// same UUID give the same bytes.
        #[arg(long, value_parser = crate::cetrafs::uuid::parse)]
        uuid: Option<[u8; 16]>,
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
        /// Path inside the image (any bytes but NUL: names need not be UTF-8).
        #[arg(default_value = "/")]
        path: OsString,
        /// Long listing: mode, links, owner, group, size, time, symlink targets.
        #[arg(short = 'l')]
        long: bool,
        /// List every directory below, each under its path.
        #[arg(short = 'R')]
        recursive: bool,
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
        /// Path inside the image (any bytes but NUL: names need not be UTF-8).
        path: OsString,
        /// Print a JSON object with the bytes (UTF-8 text, or hex) instead of raw bytes.
        #[arg(long)]
        json: bool,
        /// Show the raw on-disk state, ignoring committed journal transactions that
        /// are not replayed yet (by default they are read as a mount would).
        #[arg(long)]
        no_journal: bool,
    },
    /// Change the label or the UUID of a cetrafs image (as tune2fs -L / -U): one
    /// rewrite of its first sector, flushed.
    Tune {
        /// The image (written in place).
        image: PathBuf,
        /// A new label (at most 64 bytes).
        #[arg(long)]
        label: Option<String>,
        /// A new UUID (32 hex digits, dashes allowed).
        #[arg(long, value_parser = crate::cetrafs::uuid::parse)]
        uuid: Option<[u8; 16]>,
        /// Change it although the registry shows nodes ACTIVE (it may be mounted).
        #[arg(long)]
        force: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Restore a tree of a cetrafs image on the host (as debugfs rdump): files (holes
    /// kept), directories, symlinks, hard links, modes, owners (as root), times, xattrs.
    /// DEST must be new or empty; nothing is written outside it.
    Extract {
        /// The image.
        image: PathBuf,
        /// `[PATH] DEST`: the path inside the image (default /: its whole tree; a
        /// directory's contents, or one file), and the host directory to restore into.
        #[arg(num_args = 1..=2, required = true, value_names = ["PATH", "DEST"])]
        paths: Vec<OsString>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Read the raw on-disk state, ignoring committed journal transactions that are
        /// not replayed yet.
        #[arg(long)]
        no_journal: bool,
    },
    /// Show an inode of a cetrafs image.
    Stat {
        /// The image.
        image: PathBuf,
        /// Path inside the image (any bytes but NUL: names need not be UTF-8).
        path: OsString,
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
        /// Print one line: a reduction's value, or for a selection without an
        /// operation its shape and dtype (not the values).
        #[arg(short, long, conflicts_with = "format")]
        quiet: bool,
        /// Output format: JSON, or a table of one line per value or output cell, its
        /// coordinates in the index space a header line names.
        #[arg(long, value_parser = ["json", "table"], default_value = "json")]
        format: String,
        /// Write a partial result, or the selected values, to this .npy file.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Print only the first N values, as a table: the selected values (no
        /// operation) or the cells of a partial result.
        #[arg(long, conflicts_with_all = ["quiet", "output"])]
        preview: Option<usize>,
        /// Print the read plan (chunks, bytes to read and decode) and stop.
        #[arg(long)]
        plan: bool,
        /// Replace the --output file when it exists.
        #[arg(long)]
        force: bool,
        /// No effect: queries always run here (--plan prints the plan instead). Accepted
        /// because the other implementation's `tet query` runs a query only with -x.
        #[arg(short = 'x', long = "execute", conflicts_with = "plan")]
        execute: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Convert a NumPy .npy (one dataset) or .npz (one dataset per array) file, a Zarr v3
    /// store (a directory: one dataset per array, named by its path), a NetCDF file (when
    /// built with the `netcdf` feature) or an HDF5 file (the `hdf5` feature), one dataset
    /// per variable, to .tet.
    Convert {
        /// The .npy or .npz file, the Zarr v3 store, or the NetCDF file.
        input: PathBuf,
        /// The .tet file to write (replaced atomically).
        output: PathBuf,
        /// Chunk shape, e.g. 256,256 (default: the source's chunking, else about 1 MiB per
        /// chunk). For a Zarr, NetCDF or HDF5 input it applies to the arrays of its rank;
        /// the others keep their own.
        #[arg(long)]
        chunk: Option<String>,
        /// Payload codec.
        #[arg(long, value_parser = ["raw", "zstd"], default_value = "zstd")]
        codec: String,
        /// zstd level (1 ..= 22).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=22))]
        level: i32,
        /// Dataset name for a .npy input (default: the file name without extension); an
        /// .npz's datasets are named after its members.
        #[arg(long)]
        name: Option<String>,
        /// Replace the output file when it exists.
        #[arg(long, conflicts_with = "append")]
        force: bool,
        /// Add the input's arrays to OUTPUT, an existing .tet file, as new datasets: the
        /// file is written again atomically, its datasets' stored bytes copied as they
        /// are, its history and metadata kept, one history row added.
        #[arg(long)]
        append: bool,
        /// Dimension names, one per axis: [DATASET:]time,lat,lon (repeatable; without
        /// DATASET, every array of the input).
        #[arg(long, value_name = "[DATASET:]NAMES")]
        dims: Vec<String>,
        /// An attribute: [DATASET:]KEY=VALUE, e.g. units=K or time:calendar=standard
        /// (repeatable; `_FillValue` marks missing elements for null_count and nan_*).
        #[arg(long, value_name = "[DATASET:]KEY=VALUE")]
        attr: Vec<String>,
        /// A coordinate: [DATASET:]DIM=FILE.npy (a 1-D array, stored as dataset DIM) or
        /// DIM=MEMBER of an .npz input (repeatable).
        #[arg(long, value_name = "[DATASET:]DIM=SOURCE")]
        coord: Vec<String>,
        /// Inline coordinate labels: [DATASET:]DIM=A,B,C (at most 64, the other
        /// implementation's limit; larger coordinates are datasets, --coord).
        #[arg(long, value_name = "[DATASET:]DIM=LABELS")]
        labels: Vec<String>,
        /// For a Zarr store: only the array, or the arrays of the group, at this path.
        #[arg(long, value_name = "PATH")]
        array: Option<String>,
        /// For a NetCDF or HDF5 file: convert the numeric variables and skip (listing each) those
        /// of a type .tet cannot hold (text, strings, compound, variable-length), which
        /// are otherwise refused.
        #[arg(long)]
        skip_unsupported: bool,
        /// For a NetCDF or HDF5 file: decode CF packing (scale_factor, add_offset) and
        /// missing values (_FillValue, missing_value) into floats with NaN, as xarray's
        /// decode_cf reads them. By default the stored values are kept with those
        /// attributes (nothing lost; the nan_* reductions decode them).
        #[arg(long)]
        unpack: bool,
    },
    /// Write a dataset, or a selection of it, to a NumPy .npy file; or datasets to a Zarr
    /// v3 store (an output ending in .zarr).
    Export {
        /// The .tet file.
        file: PathBuf,
        /// The dataset (required for .npy; for .zarr, without it every dataset).
        #[arg(long)]
        dataset: Option<String>,
        /// The .npy file, or the .zarr store (a directory), to write.
        output: PathBuf,
        /// A selection as JSON, e.g. '[{"start": 0, "stop": 10}]'.
        #[arg(long)]
        selection: Option<String>,
        /// Replace the output file when it exists.
        #[arg(long)]
        force: bool,
        /// Also write OUTPUT.coords.json: the dataset's dimension names, attrs and, per
        /// axis with a coordinate, its values at the selected indices.
        #[arg(long)]
        coords: bool,
        #[command(flatten)]
        memory: MemoryArgs,
    },
    /// Write an element-wise transform of a dataset to a new .tet file, chunk by chunk:
    /// zscore, minmax (or min_max_normalize), center, scale (--factor), log1p, sqrt, clip
    /// (--min, --max). The output keeps the dataset's name, shape, chunking, codecs, dims,
    /// coordinates and attrs, and its history gets one row for the transform.
    Transform {
        /// The .tet file.
        file: PathBuf,
        /// The .tet file to write (replaced atomically; never the input).
        output: PathBuf,
        /// The dataset.
        #[arg(long)]
        dataset: String,
        /// The transform.
        #[arg(long, value_parser = tet_alloc::tet::transform::NAMES)]
        op: String,
        /// scale: the factor (`a * factor`).
        #[arg(long, allow_hyphen_values = true)]
        factor: Option<f64>,
        /// clip: the lower bound.
        #[arg(long, allow_hyphen_values = true)]
        min: Option<f64>,
        /// clip: the upper bound.
        #[arg(long, allow_hyphen_values = true)]
        max: Option<f64>,
        /// zstd level of the chunks written as zstd (those stored as zstd in the source).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=22))]
        level: i32,
        /// Replace the output file when it exists.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Repair a .tet file: -n reports, -p applies fixes that lose nothing, -y applies
    /// every fix; without one of them it asks per fix on a terminal. A .tet file's
    /// chunks are all decoded (as verify --deep). Exit 0 nothing to fix, 1 all corrected,
    /// 4 problems left, 8 operational error, 16 usage error.
    Repair {
        /// The file (.tet: replaced atomically unless -o is given; cetrafs: repaired in
        /// place through its journal unless -o is given).
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
        /// Write the repaired file here and leave the original byte-identical (a cetrafs
        /// image is copied, sparse, and the copy repaired). Must not be the input.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        /// Replace chunks that cannot be decoded by raw zeros (NaN for floats),
        /// recording each loss in the history footer. Lossy: needs -y or a yes.
        #[arg(long)]
        zero_bad_chunks: bool,
        /// Replace the -o file when it exists; cetrafs: also repair although the
        /// registry shows nodes ACTIVE (the filesystem may be mounted), and replay their
        /// journals.
        #[arg(long)]
        force: bool,
        /// cetrafs: print JSON.
        #[arg(long)]
        json: bool,
        /// cetrafs: restore the primary superblock from the copy in this block (as
        /// e2fsck -b); without it a primary that fails is restored from the copy the
        /// search finds. `info` lists the copies.
        #[arg(short = 'b', long = "superblock", value_name = "BLOCK")]
        superblock: Option<u64>,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Copy a file or a tree (modes, owners, times, symlinks, hard links, xattrs) into a
    /// cetrafs image, as one node through its journal (docs/cetrafs.md section 15).
    Put(crate::cetrafs::write::PutArgs),
    /// Remove files (and with -r directories) from a cetrafs image.
    Rm(crate::cetrafs::write::RmArgs),
    /// Make directories in a cetrafs image.
    Mkdir(crate::cetrafs::write::MkdirArgs),
    /// Rename or move a path inside a cetrafs image.
    Mv(crate::cetrafs::write::MvArgs),
    /// Make a hard link, or with -s a symbolic link, inside a cetrafs image.
    Ln(crate::cetrafs::write::LnArgs),
    /// Change permission bits inside a cetrafs image.
    Chmod(crate::cetrafs::write::ChmodArgs),
    /// Change numeric owner and group inside a cetrafs image.
    Chown(crate::cetrafs::write::ChownArgs),
    /// Set access and modification times (creating missing files) in a cetrafs image.
    Touch(crate::cetrafs::write::TouchArgs),
    /// Set the size of files in a cetrafs image.
    Truncate(crate::cetrafs::write::TruncateArgs),
    /// Set or remove an extended attribute in a cetrafs image.
    Setfattr(crate::cetrafs::write::SetfattrArgs),
    /// Print the extended attributes of paths in a cetrafs image (as getfattr -d).
    Getfattr(crate::cetrafs::write::GetfattrArgs),
    /// Mount a cetrafs image through FUSE, read-write as one node or --read-only.
    Mount(crate::cetrafs::mount::MountArgs),
    /// Unmount a `tet-host mount` and wait until its process has written back and left
    /// (plain `umount` of a FUSE mount returns before that).
    Umount(crate::cetrafs::mount::UmountArgs),
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
        /// cetrafs: check through the superblock copy in this block instead of the
        /// primary (as e2fsck -b); without it a primary that fails is replaced by the
        /// copy the search finds. `info` lists the copies.
        #[arg(short = 'b', long = "superblock", value_name = "BLOCK")]
        superblock: Option<u64>,
        /// Decode every chunk, not only the first 128 (.tet).
        #[arg(long)]
        deep: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
}

impl Command {
    /// Whether the command prints JSON (`--json`, or `query` in its default JSON format),
    /// and so reports its errors as JSON too.
    pub fn json(&self) -> bool {
        match self {
            Command::Info { json, .. }
            | Command::Mkfs { json, .. }
            | Command::Replay { json, .. }
            | Command::Ls { json, .. }
            | Command::Cat { json, .. }
            | Command::Stat { json, .. }
            | Command::Extract { json, .. }
            | Command::Tune { json, .. }
            | Command::Verify { json, .. } => *json,
            Command::Query { quiet, format, .. } => !*quiet && format == "json",
            // `.tet` repair prints lines: `main` turns JSON errors off for it.
            Command::Repair { json, .. } => *json,
            Command::Convert { .. } | Command::Export { .. } | Command::Transform { .. } => false,
            Command::Put(_)
            | Command::Rm(_)
            | Command::Mkdir(_)
            | Command::Mv(_)
            | Command::Ln(_)
            | Command::Chmod(_)
            | Command::Chown(_)
            | Command::Touch(_)
            | Command::Truncate(_)
            | Command::Setfattr(_)
            | Command::Getfattr(_)
            | Command::Mount(_)
            | Command::Umount(_) => false,
        }
    }
}

/// Output into a closed pipe (`tet-host info FILE | head -1`) ends the process quietly
/// with status 0, as ripgrep does: Rust ignores SIGPIPE, so a write to a closed standard
/// output fails and `println!` panics; that panic is turned into a clean exit, and any
/// other failure to write standard output (`> /dev/full`) into a message and exit 8.
/// Every other panic keeps the default report.
pub fn quiet_on_closed_stdout() {
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
            crate::say!("cannot write to standard output: {why}");
            std::process::exit(i32::from(Exit::Operational.code()));
        }
        default(info);
    }));
}

/// The exit for a failed write to standard output, the same for every command: a closed
/// pipe (`| head`) ends quietly with 0, any other failure (`> /dev/full`) is said and
/// exits 8.
pub fn stdout_failed(e: &std::io::Error) -> Exit {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Exit::Clean;
    }
    crate::say!("cannot write to standard output: {e}");
    Exit::Operational
}
