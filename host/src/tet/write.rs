//! Writing `.tet` files on a host: the streaming writer of `tet-alloc`, with zstd chunks
//! compressed on every core. Tiles arrive in batches; a batch is compressed in parallel
//! (one C compressor per thread) and then written in arrival order, so the file is the
//! same whatever the thread count. Memory is the batch (raw and compressed), never the
//! array.

use rayon::prelude::*;
use tet_alloc::tet::writer::{Compressor, Output, WriteError, Writer};
use tet_core::tet::{Codec, DatasetId};

use crate::tet::codec::CCompressor;

/// One tile to write: dataset, grid coordinates, clipped tile bytes.
pub type Tile = (DatasetId, Vec<u64>, Vec<u8>);

/// The tile bytes of `batch` (for a progress bar).
pub fn batch_bytes(batch: &[Tile]) -> u64 {
    batch
        .iter()
        .map(|(_, _, t)| u64::try_from(t.len()).unwrap_or(0))
        .sum()
}

/// Compresses `batch` at zstd `level` on the current Rayon pool and writes it, in order.
/// Raw tiles (`codec == Codec::Raw`) are written as they are.
pub fn write_batch<O: Output>(
    w: &mut Writer<O>,
    batch: &[Tile],
    codec: Codec,
    level: i32,
) -> Result<(), WriteError<O::Error>> {
    if codec == Codec::Raw {
        for (d, c, t) in batch {
            w.write_chunk(*d, c, t, Codec::Raw)?;
        }
        return Ok(());
    }
    let frames: Vec<Result<Vec<u8>, tet_core::Error>> = batch
        .par_iter()
        .map_init(
            || CCompressor::new(level),
            |cc, (_, _, t)| {
                let mut out = Vec::new();
                cc.compress(t, &mut out).map(|()| out)
            },
        )
        .collect();
    for ((d, c, t), frame) in batch.iter().zip(frames) {
        let frame = frame.map_err(WriteError::Compress)?;
        let raw = u64::try_from(t.len()).unwrap_or(u64::MAX);
        w.write_chunk_encoded(*d, c, Codec::Zstd, raw, &frame)?;
    }
    Ok(())
}

/// A tile as a reader gives it: its elements (row-major, little-endian, clipped), or a
/// zstd frame of them made elsewhere and already held to the rules the `.tet` reader
/// applies to a zstd chunk (a frame copied from the source), with the tile's size.
pub enum Payload {
    Elements(Vec<u8>),
    Frame { frame: Vec<u8>, raw_len: u64 },
}

impl Payload {
    /// The tile's decoded size in bytes.
    pub fn raw_len(&self) -> u64 {
        match self {
            Payload::Elements(t) => u64::try_from(t.len()).unwrap_or(u64::MAX),
            Payload::Frame { raw_len, .. } => *raw_len,
        }
    }
}

/// One tile to write whose payload may be a ready frame: dataset, grid coordinates,
/// payload.
pub type Piece = (DatasetId, Vec<u64>, Payload);

/// Writes `batch` in order: ready frames as they are (a zstd chunk), elements as
/// [`write_batch`] writes a tile (compressed at zstd `level` on the current Rayon pool
/// unless `codec` is raw). Returns how many ready frames were written.
pub fn write_pieces<O: Output>(
    w: &mut Writer<O>,
    batch: &[Piece],
    codec: Codec,
    level: i32,
) -> Result<u64, WriteError<O::Error>> {
    let frames: Vec<Option<Result<Vec<u8>, tet_core::Error>>> = if codec == Codec::Raw {
        batch.iter().map(|_| None).collect()
    } else {
        batch
            .par_iter()
            .map_init(
                || CCompressor::new(level),
                |cc, (_, _, p)| match p {
                    Payload::Elements(t) => {
                        let mut out = Vec::new();
                        Some(cc.compress(t, &mut out).map(|()| out))
                    }
                    Payload::Frame { .. } => None,
                },
            )
            .collect()
    };
    let mut copied = 0u64;
    for ((d, c, p), made) in batch.iter().zip(frames) {
        match (p, made) {
            (Payload::Frame { frame, raw_len }, _) => {
                w.write_chunk_encoded(*d, c, Codec::Zstd, *raw_len, frame)?;
                copied = copied.saturating_add(1);
            }
            (Payload::Elements(t), Some(frame)) => {
                let frame = frame.map_err(WriteError::Compress)?;
                let raw = u64::try_from(t.len()).unwrap_or(u64::MAX);
                w.write_chunk_encoded(*d, c, Codec::Zstd, raw, &frame)?;
            }
            (Payload::Elements(t), None) => w.write_chunk(*d, c, t, Codec::Raw)?,
        }
    }
    Ok(copied)
}
