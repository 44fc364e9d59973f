//! `tet-host`: inspect, verify, repair and convert `.tet` files and cetrafs images.
//!
//! This file parses the command line ([`tet_host::cli`]) and dispatches to the command
//! modules of the library (`tet_host::tet::*`, `tet_host::cetrafs::*`); exit codes follow
//! the fsck convention, one table for every command (README).

use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use clap::Parser;
use tet_host::cli::{self, Cli, Command};
use tet_host::input::{with_input, with_input_mode};
use tet_host::repair_mode::Mode;
use tet_host::tet::query_doc;
use tet_host::{budget, cetrafs, sniff, tet, Exit, Output};

fn main() -> ExitCode {
    cli::quiet_on_closed_stdout();
    // (The mount handles these signals itself: they unmount it.)
    let mounting = std::env::args_os().nth(1).is_some_and(|a| a == "mount");
    if !mounting {
        tet_host::atomic::remove_temporaries_on_signal();
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Clean
            };
            let _ = e.print();
            if code == Exit::Usage && std::env::args_os().any(|a| a == "--json") {
                tet_host::report::json_errors();
                let text = e.to_string();
                let first = text.lines().next().unwrap_or_default();
                tet_host::report::remember(first.trim_start_matches("error: ").to_string());
                tet_host::report::finish(code);
            }
            return ExitCode::from(code.code());
        }
    };
    if cli.command.json() {
        tet_host::report::json_errors();
    }
    let exit = dispatch(cli.command);
    tet_host::report::finish(exit);
    ExitCode::from(exit.code())
}

/// Runs `f` when `image` is a cetrafs image; otherwise says what it is (exit 16).
fn only_cetrafs(image: &std::path::Path, f: impl FnOnce() -> Exit) -> Exit {
    match sniff(image) {
        Err(e) => e,
        Ok(None) => {
            tet_host::say!("{}: a .tet file, not a cetrafs image", image.display());
            Exit::Usage
        }
        Ok(Some(_)) => f(),
    }
}

/// Runs one command.
fn dispatch(command: Command) -> Exit {
    match command {
        Command::Info {
            file,
            json,
            metadata,
            history,
        } => {
            let out = if json { Output::Json } else { Output::Human };
            let more = tet::info::More { metadata, history };
            match sniff(&file) {
                Err(e) => e,
                Ok(Some(_)) if metadata || history => {
                    tet_host::say!(
                        "{}: --metadata and --history are for .tet files; this is a cetrafs image",
                        file.display()
                    );
                    Exit::Usage
                }
                Ok(Some(dev)) => {
                    cetrafs::write::warn_if_in_use(&file);
                    cetrafs::info::info(&file, &cetrafs::reading(&file, dev), out)
                }
                Ok(None) => with_input(&file, |b| tet::info::info_with(&file, b, out, more)),
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
            force,
            uuid,
            json,
        } => {
            let o = cetrafs::mkfs::MkfsOptions {
                size,
                bg_size: block_group_size,
                zone_groups,
                nodes,
                inodes,
                label,
                from: from.as_deref(),
                output: if json { Output::Json } else { Output::Human },
                force,
                uuid,
            };
            cetrafs::mkfs::mkfs(&image, &o)
        }
        Command::Replay {
            image,
            node_id,
            force,
            json,
        } => match sniff(&image).map(|d| d.is_some()) {
            Err(e) => e,
            Ok(false) => {
                tet_host::say!(
                    "{}: not a cetrafs image (no CTFS magic); replay reads cetrafs images",
                    image.display()
                );
                Exit::Usage
            }
            Ok(true) => match cetrafs::device::FileDevice::open_rw(&image) {
                Ok(d) => match cetrafs::write::gate("replay", &image) {
                    Err(e) => e,
                    Ok(hold) => cetrafs::replay::replay(
                        &image,
                        &d,
                        cetrafs::replay::Which {
                            node_id,
                            force,
                            held: hold.is_some(),
                        },
                        if json { Output::Json } else { Output::Human },
                    ),
                },
                Err(e) => {
                    tet_host::say!("cannot write {}: {e}", image.display());
                    Exit::Operational
                }
            },
        },
        Command::Ls {
            image,
            path,
            long,
            recursive,
            json,
            no_journal,
        } => cetrafs::with_device(&image, |d| {
            cetrafs::read::ls(
                &image,
                d,
                path.as_bytes(),
                if json { Output::Json } else { Output::Human },
                no_journal,
                cetrafs::read::LsOptions { long, recursive },
            )
        }),
        Command::Cat {
            image,
            path,
            json,
            no_journal,
        } => cetrafs::with_device(&image, |d| {
            cetrafs::read::cat(
                &image,
                d,
                path.as_bytes(),
                if json { Output::Json } else { Output::Human },
                no_journal,
            )
        }),
        Command::Stat {
            image,
            path,
            json,
            no_journal,
        } => cetrafs::with_device(&image, |d| {
            cetrafs::read::stat(
                &image,
                d,
                path.as_bytes(),
                if json { Output::Json } else { Output::Human },
                no_journal,
            )
        }),
        Command::Put(a) => only_cetrafs(&a.image, || cetrafs::write::put(&a)),
        Command::Rm(a) => only_cetrafs(&a.image, || cetrafs::write::rm(&a)),
        Command::Mkdir(a) => only_cetrafs(&a.image, || cetrafs::write::mkdir(&a)),
        Command::Mv(a) => only_cetrafs(&a.image, || cetrafs::write::mv(&a)),
        Command::Ln(a) => only_cetrafs(&a.image, || cetrafs::write::ln(&a)),
        Command::Chmod(a) => only_cetrafs(&a.image, || cetrafs::write::chmod(&a)),
        Command::Chown(a) => only_cetrafs(&a.image, || cetrafs::write::chown(&a)),
        Command::Touch(a) => only_cetrafs(&a.image, || cetrafs::write::touch(&a)),
        Command::Truncate(a) => only_cetrafs(&a.image, || cetrafs::write::truncate(&a)),
        Command::Setfattr(a) => only_cetrafs(&a.image, || cetrafs::write::setfattr(&a)),
        Command::Getfattr(a) => only_cetrafs(&a.image, || cetrafs::write::getfattr(&a)),
        Command::Mount(a) => only_cetrafs(&a.image, || cetrafs::mount::mount(&a)),
        Command::Umount(a) => cetrafs::mount::umount(&a),
        Command::Tune {
            image,
            label,
            uuid,
            force,
            json,
        } => match sniff(&image) {
            Err(e) => e,
            Ok(None) => {
                tet_host::say!("{}: a .tet file, not a cetrafs image", image.display());
                Exit::Usage
            }
            Ok(Some(_)) => cetrafs::tune::tune(
                &image,
                &cetrafs::tune::TuneOptions { label, uuid, force },
                if json { Output::Json } else { Output::Human },
            ),
        },
        Command::Extract {
            image,
            paths,
            json,
            no_journal,
        } => {
            let (inner, dest) = match paths.as_slice() {
                [dest] => (&b"/"[..], dest),
                [inner, dest] => (inner.as_bytes(), dest),
                _ => return Exit::Usage,
            };
            cetrafs::with_device(&image, |d| {
                cetrafs::extract::extract(
                    &image,
                    d,
                    inner,
                    std::path::Path::new(dest),
                    if json { Output::Json } else { Output::Human },
                    no_journal,
                )
            })
        }
        Command::Query {
            query,
            file,
            quiet,
            format,
            output,
            preview,
            plan,
            force,
            execute: _,
            read,
        } => {
            let text = match query_doc::read_query_arg(&query) {
                Ok(t) => t,
                Err(e) => {
                    tet_host::say!("{}", e.message);
                    return if e.unreadable {
                        Exit::Operational
                    } else {
                        Exit::Usage
                    };
                }
            };
            let doc = match query_doc::parse_query(&text) {
                Ok(d) => d,
                Err(e) => {
                    tet_host::say!("{e}");
                    return Exit::Usage;
                }
            };
            let o = tet::query::QueryOptions {
                style: if quiet {
                    tet::query::Style::Quiet
                } else if format == "table" {
                    tet::query::Style::Table
                } else {
                    tet::query::Style::Json
                },
                plan_only: plan,
                threads: read.jobs.map(usize::from),
                budget: read.memory.memory_budget,
                output,
                preview,
                force,
                query_file: text.file,
            };
            with_input_mode(&file, read.memory.no_mmap, |b| {
                tet::query::query(&file, b, &doc, &o)
            })
        }
        Command::Convert {
            input,
            output,
            chunk,
            codec,
            level,
            name,
            force,
            append,
            dims,
            attr,
            coord,
            labels,
            array,
            skip_unsupported,
            unpack,
        } => {
            let chunk = match chunk.as_deref().map(tet::convert::parse_chunk).transpose() {
                Ok(c) => c,
                Err(e) => {
                    tet_host::say!("{e}");
                    return Exit::Usage;
                }
            };
            let zarr = tet::zarr::is_store(&input);
            let library = if zarr {
                None
            } else {
                tet_host::tet::convert::library_for(&input)
            };
            if library.is_none() && !zarr && tet::convert::library_named(&input) && input.is_file()
            {
                tet_host::say!(
                    "{}: not a readable NetCDF or HDF5 file (named as one, it starts with \
                     neither signature: cut short, or another kind of file)",
                    input.display()
                );
                return Exit::Problems;
            }
            if (skip_unsupported || unpack) && library.is_none() {
                tet_host::say!(
                    "{} is for NetCDF and HDF5 files; {} is not one",
                    if unpack {
                        "--unpack"
                    } else {
                        "--skip-unsupported"
                    },
                    input.display()
                );
                return Exit::Usage;
            }
            let library_options = tet::convert::LibraryOptions {
                skip_unsupported,
                unpack,
            };
            if append && library.is_some() {
                tet_host::say!(
                    "--append adds the arrays of a .npy or .npz file; convert the NetCDF or \
                     HDF5 file to a .tet file of its own"
                );
                return Exit::Usage;
            }
            if array.is_some() && !zarr {
                tet_host::say!(
                    "--array picks arrays of a Zarr store; {} is not one",
                    input.display()
                );
                return Exit::Usage;
            }
            if append && zarr {
                tet_host::say!(
                    "--append adds the arrays of a .npy or .npz file; convert the Zarr store \
                     to a .tet file of its own"
                );
                return Exit::Usage;
            }
            let options = tet::convert::ConvertOptions {
                chunk,
                codec: if codec == "raw" {
                    tet_core::tet::Codec::Raw
                } else {
                    tet_core::tet::Codec::Zstd
                },
                level,
                name,
                force,
                append,
                meta: tet::convert::MetaArgs {
                    dims,
                    attrs: attr,
                    coords: coord,
                    labels,
                },
            };
            if zarr {
                tet::zarr::convert(&input, &output, array.as_deref(), &options)
            } else if let Some(library) = library {
                match library {
                    tet::convert::Library::NetCdf => {
                        convert_netcdf(&input, &output, library_options, &options)
                    }
                    tet::convert::Library::Hdf5 => {
                        convert_hdf5(&input, &output, library_options, &options)
                    }
                }
            } else {
                tet::convert::convert(&input, &output, &options)
            }
        }
        Command::Export {
            file,
            dataset,
            output,
            selection,
            force,
            coords,
            memory,
        } => {
            let sel = match selection
                .as_deref()
                .map(query_doc::parse_selection_arg)
                .transpose()
            {
                Ok(s) => s.unwrap_or_default(),
                Err(e) => {
                    tet_host::say!("--selection: {e}");
                    return Exit::Usage;
                }
            };
            let to_zarr =
                output.extension().is_some_and(|e| e == "zarr") || tet::zarr::is_store(&output);
            if to_zarr {
                if selection.is_some() || coords {
                    tet_host::say!(
                        "--selection and --coords are for .npy exports; a Zarr export writes \
                         whole datasets with their axis metadata"
                    );
                    return Exit::Usage;
                }
                // The output is checked before the input is read.
                if let Err((code, why)) = tet::zarr::check_export_output(&file, &output, force) {
                    tet_host::say!("{why}");
                    return code;
                }
                return with_input_mode(&file, memory.no_mmap, |b| {
                    tet::zarr::export(
                        &file,
                        b,
                        dataset.as_deref(),
                        &output,
                        memory.memory_budget,
                        force,
                    )
                });
            }
            let Some(dataset) = dataset else {
                tet_host::say!("export to .npy needs --dataset NAME");
                return Exit::Usage;
            };
            if let Err(why) = tet_host::atomic::check_parent(&output) {
                tet_host::say!("{why}");
                return Exit::Operational;
            }
            tet_host::input::with_opened(&file, memory.no_mmap, |input| {
                tet::export::export_streaming(
                    &file,
                    input.bytes(),
                    &dataset,
                    &sel,
                    &output,
                    memory.memory_budget,
                    force,
                    coords,
                    &|at, len| input.release(at, len),
                )
            })
        }
        Command::Transform {
            file,
            output,
            dataset,
            op,
            factor,
            min,
            max,
            level,
            force,
            read,
        } => {
            let t = match tet_alloc::tet::transform::Transform::parse(&op, factor, min, max) {
                Ok(t) => t,
                Err(e) => {
                    tet_host::say!("--op {op}: {e}");
                    return Exit::Usage;
                }
            };
            let options = tet::transform::TransformOptions {
                dataset,
                transform: t,
                threads: read.jobs.map(usize::from),
                budget: read.memory.memory_budget,
                level,
                force,
            };
            with_input_mode(&file, read.memory.no_mmap, |b| {
                tet::transform::transform(&file, b, &output, &options)
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
            superblock,
            read,
        } => {
            let mode = match (no, preen, yes) {
                (true, _, _) => Mode::No,
                (_, true, _) => Mode::Preen,
                (_, _, true) => Mode::Yes,
                _ => Mode::Ask,
            };
            match sniff(&file) {
                Err(e) => e,
                Ok(Some(_)) => {
                    let out = if json { Output::Json } else { Output::Human };
                    cetrafs::repair::repair(&file, output.as_deref(), mode, force, superblock, out)
                }
                Ok(None) => with_input_mode(&file, read.memory.no_mmap, |b| {
                    // `.tet` repair reports in lines, never JSON.
                    tet_host::report::set_json_errors(false);
                    let o = tet::repair::RepairOptions {
                        mode,
                        output: output.as_deref(),
                        zero_bad_chunks,
                        decode: read.decode(true),
                        force,
                    };
                    tet::repair::repair(&file, b, &o)
                }),
            }
        }
        Command::Verify {
            file,
            json,
            quiet,
            superblock,
            deep,
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
                    cetrafs::write::warn_if_in_use(&file);
                    let limit = read
                        .memory
                        .memory_budget
                        .unwrap_or_else(|| budget::host_ram() / 4);
                    cetrafs::verify::verify(&file, &dev, out, limit, superblock)
                }
                Ok(None) => with_input_mode(&file, read.memory.no_mmap, |b| {
                    tet::verify::verify(&file, b, out, &read.decode(deep))
                }),
            }
        }
    }
}

/// `convert` of a NetCDF file: through libnetcdf when built with the `netcdf` feature.
#[cfg(feature = "netcdf")]
fn convert_netcdf(
    input: &std::path::Path,
    output: &std::path::Path,
    lib: tet::convert::LibraryOptions,
    o: &tet::convert::ConvertOptions,
) -> Exit {
    tet::netcdf::convert(input, output, lib, o)
}

/// `convert` of a NetCDF file in a build without the `netcdf` feature: says how to get it.
#[cfg(not(feature = "netcdf"))]
fn convert_netcdf(
    input: &std::path::Path,
    _output: &std::path::Path,
    _lib: tet::convert::LibraryOptions,
    _o: &tet::convert::ConvertOptions,
) -> Exit {
    if cfg!(feature = "hdf5") {
        tet_host::say!(
            "{} is a NetCDF classic file; this tet-host reads HDF5 (and so NetCDF-4) but \
             was built without NetCDF support: build it with `cargo build -p tet-host \
             --features netcdf,hdf5` (needs libnetcdf-dev)",
            input.display()
        );
    } else {
        tet_host::say!(
            "{} is a NetCDF (or HDF5) file; this tet-host was built without NetCDF or HDF5 \
             support: build it with `cargo build -p tet-host --features netcdf` (needs \
             libnetcdf-dev) or `--features hdf5` (needs libhdf5-dev)",
            input.display()
        );
    }
    Exit::Usage
}

/// `convert` of an HDF5 file: through libhdf5 when built with the `hdf5` feature.
#[cfg(feature = "hdf5")]
fn convert_hdf5(
    input: &std::path::Path,
    output: &std::path::Path,
    lib: tet::convert::LibraryOptions,
    o: &tet::convert::ConvertOptions,
) -> Exit {
    tet::hdf5::convert(input, output, lib, o)
}

/// Never called in a build without the `hdf5` feature ([`tet::convert::library_for`]
/// gives NetCDF there), but said plainly if it were.
#[cfg(not(feature = "hdf5"))]
fn convert_hdf5(
    input: &std::path::Path,
    output: &std::path::Path,
    lib: tet::convert::LibraryOptions,
    o: &tet::convert::ConvertOptions,
) -> Exit {
    convert_netcdf(input, output, lib, o)
}
