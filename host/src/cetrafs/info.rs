//! `tet-host info` for a cetrafs image: superblock, region map, groups, nodes, journals.

use std::ops::ControlFlow;
use std::path::Path;

use serde_json::{json, Value};
use tet_core::cetrafs::Buffers;

use super::*;
use crate::{Exit, Output};

/// `tet-host info` for an image.
pub fn info(path: &Path, dev: Dev<'_>, output: Output) -> Exit {
    let fs = match open_fs(path, dev) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let sb = fs.superblock();
    let mut bufs = Buffers::new();
    let mut zgs = Vec::new();
    for z in 0..sb.zone_group_count() {
        if let Ok(zg) = fs.zone_group(z, &mut bufs.data) {
            zgs.push(json!({"id": z, "owner": zg.owner(), "free_data_blocks": zg.hot().free_data_blocks.get(), "hb_seq": zg.hot().hb_seq.get(), "first_bg": zg.cold().first_bg_id.get(), "bg_count": zg.cold().bg_count.get()}));
        }
    }
    let mut bgs = Vec::new();
    let _ = fs.for_each_block_group(&mut bufs.data, |b, bg| {
        if let Ok(bg) = bg {
            let r = &bg.raw();
            bgs.push(json!({"id": b, "owner_zg": r.owner_zg.get(), "start": r.start_block.get(), "length": r.length_blocks.get(), "data_blocks": r.data_block_count.get(), "free_data_blocks": r.free_data_blocks.get(), "reconcile_seq": r.reconcile_seq.get()}));
        }
        ControlFlow::Continue(())
    });
    let mut nodes = Vec::new();
    let mut journals = Vec::new();
    let slots = committed_slots(&fs, &mut bufs);
    for row in 0..sb.node_capacity() {
        if let Ok(Some(n)) = fs.node_row(row, &mut bufs.data) {
            let host = String::from_utf8_lossy(&n.raw().hostname)
                .trim_end_matches('\0')
                .to_string();
            nodes.push(json!({"row": row, "node_id": n.raw().node_id.get(), "state": n.state_name(), "hostname": host}));
        }
        let mut counts = std::collections::BTreeMap::new();
        for c in slots.iter().filter(|c| c.row == row) {
            if let Some(class) = c.class {
                let n = counts.entry(class.name()).or_insert(0u64);
                *n = n.saturating_add(1);
            }
        }
        let flag = fs.journal_flag(row, &mut bufs.data);
        journals.push(match flag {
            Ok(f) => json!({"row": row, "state": if f.is_dirty() { "DIRTY" } else { "CLEAN" }, "replay_owner": f.raw().replay_owner.get(), "slots": counts}),
            Err(e) => json!({"row": row, "error": describe(&e)}),
        });
    }
    let regions: Vec<Value> =
        std::iter::once(json!({"name": "superblock", "start": 0, "blocks": 1}))
            .chain(
                sb.regions()
                    .iter()
                    .map(|r| json!({"name": r.name, "start": r.start, "blocks": r.blocks})),
            )
            .collect();
    // Each copy's place and what it holds (section 3.1).
    let copies: Vec<Value> = tet_alloc::cetrafs::copies::audit(fs.device(), sb, &mut bufs.data)
        .iter()
        .map(|c| {
            let state = match (&c.problem, sb.has_copies()) {
                (None, _) => "ok".to_string(),
                (Some(_), false) if c.blank => "none".to_string(),
                (Some(e), _) => describe(e),
            };
            json!({"block": c.lba, "state": state})
        })
        .collect();
    // Free counts as dumpe2fs gives them: data blocks from the block group descriptors
    // (cached counts), inodes from the inode bitmap (counted).
    let data_blocks: u64 = bgs.iter().filter_map(|b| b["data_blocks"].as_u64()).sum();
    let free_blocks: u64 = bgs
        .iter()
        .filter_map(|b| b["free_data_blocks"].as_u64())
        .sum();
    let free_inodes = free_inodes(fs.device(), sb, &mut bufs.data);
    let raw = sb.raw();
    let label = String::from_utf8_lossy(&raw.label)
        .trim_end_matches('\0')
        .to_string();
    let v = json!({
        "file": path.display().to_string(),
        "format": "cetrafs",
        "version": raw.format_version.get(),
        "label": label,
        "uuid": super::uuid::format(&raw.uuid),
        "total_blocks": sb.total_blocks(),
        "device_blocks": fs.device().block_count(),
        "read_only": sb.read_only(),
        "features": features_json(&sb.features()),
        "zone_groups": zgs,
        "block_groups": bgs,
        "node_capacity": sb.node_capacity(),
        "nodes": nodes,
        "inode_count": sb.inode_count(),
        "free_inodes": free_inodes,
        "data_blocks": data_blocks,
        "free_data_blocks": free_blocks,
        "generation": raw.generation.get(),
        "superblock_copies": if sb.has_copies() { Value::Array(copies.clone()) } else { Value::Array(Vec::new()) },
        "regions": regions,
        "journals": journals,
    });
    match output {
        Output::Json => crate::report::print_json(&v),
        _ => {
            // An image cut short says so where its size is shown.
            let short = match fs.shortened() {
                Some(_) => format!(", the image only {}", fs.device().block_count()),
                None => String::new(),
            };
            let f = features_json(&sb.features());
            let words: Vec<&str> = ["compat", "incompat", "ro_compat"]
                .iter()
                .flat_map(|k| f.get(*k).and_then(Value::as_array).into_iter().flatten())
                .filter_map(Value::as_str)
                .collect();
            let pct =
                |part: u64, whole: u64| part.saturating_mul(100).checked_div(whole).unwrap_or(0);
            println!(
                "image:        {} ({} blocks of 4096 bytes{short})",
                path.display(),
                sb.total_blocks()
            );
            println!(
                "size:         {}",
                super::mkfs::precise(sb.total_blocks().saturating_mul(4096))
            );
            println!(
                "format:       cetrafs 0x{:04x}{}",
                raw.format_version.get(),
                if sb.read_only() {
                    ", read-only (unknown ro-compat bits)"
                } else {
                    ""
                }
            );
            println!("label:        '{label}'");
            println!("uuid:         {}", super::uuid::format(&raw.uuid));
            println!("features:     {}", words.join(" "));
            println!(
                "data blocks:  {free_blocks} free of {data_blocks} ({} % free, {})",
                pct(free_blocks, data_blocks),
                super::mkfs::precise(free_blocks.saturating_mul(4096))
            );
            match free_inodes {
                Some(n) => println!(
                    "inodes:       {n} free of {} ({} % free)",
                    sb.inode_count().saturating_sub(1),
                    pct(n, sb.inode_count().saturating_sub(1))
                ),
                None => println!(
                    "inodes:       {} (the inode bitmap does not read)",
                    sb.inode_count()
                ),
            }
            println!("generation:   {}", raw.generation.get());
            if sb.has_copies() {
                let listed: Vec<String> = copies
                    .iter()
                    .map(|c| {
                        format!(
                            "block {} ({})",
                            c["block"],
                            c["state"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                println!("sb copies:    {}", listed.join(", "));
            } else if copies.iter().all(|c| c["state"] == "none") {
                println!("sb copies:    none (`tet-host repair -p` adds them)");
            } else {
                println!(
                    "sb copies:    none (their places hold other bytes: `tet-host repair -y` \
                     adds them over those)"
                );
            }
            println!("regions:");
            for r in &regions {
                println!(
                    "  {:<22} start {:>8}  blocks {:>8}",
                    r["name"].as_str().unwrap_or(""),
                    r["start"],
                    r["blocks"]
                );
            }
            println!("zone groups:");
            for z in &zgs {
                println!(
                    "  zg {:<3} block groups {}..{}  free {}  owner {}",
                    z["id"],
                    z["first_bg"],
                    z["first_bg"]
                        .as_u64()
                        .unwrap_or(0)
                        .saturating_add(z["bg_count"].as_u64().unwrap_or(0)),
                    z["free_data_blocks"],
                    if z["owner"].is_null() {
                        "none".into()
                    } else {
                        z["owner"].to_string()
                    }
                );
            }
            println!("block groups:");
            for b in &bgs {
                println!("  bg {:<3} start {:>8}  length {:>6}  data {:>6}  free {:>6}  zg {}  reconcile_seq {}", b["id"], b["start"], b["length"], b["data_blocks"], b["free_data_blocks"], b["owner_zg"], b["reconcile_seq"]);
            }
            println!(
                "nodes:        {} of {} registry rows in use",
                nodes.len(),
                sb.node_capacity()
            );
            for n in &nodes {
                println!(
                    "  row {:<3} node {}  {}  host '{}'",
                    n["row"],
                    n["node_id"],
                    n["state"].as_str().unwrap_or(""),
                    n["hostname"].as_str().unwrap_or("")
                );
            }
            let clean = journals.iter().filter(|j| j["state"] == "CLEAN").count();
            println!("journals:     {} of {} clean", clean, journals.len());
            for j in &journals {
                let slots: Vec<String> = j["slots"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(class, n)| format!("{n} {class}"))
                    .collect();
                let what = match (j["error"].as_str(), slots.is_empty()) {
                    (Some(e), _) => e.to_string(),
                    (None, true) => "no committed transactions".to_string(),
                    (None, false) => format!("committed slots: {}", slots.join(", ")),
                };
                println!(
                    "  journal row {:<3} {}  {what}",
                    j["row"],
                    j["state"].as_str().unwrap_or("ERROR"),
                );
            }
        }
    }
    Exit::Clean
}

/// Clear bits of the inode bitmap below `inode_count` (inode 0's bit is always set), or
/// `None` when a bitmap block does not read.
fn free_inodes(
    dev: Dev<'_>,
    sb: &tet_core::cetrafs::Superblock,
    buf: &mut tet_core::block::Block,
) -> Option<u64> {
    let start = sb.raw().inode_bitmap_start.get();
    let bits = sb.inode_count();
    let mut free = 0u64;
    for k in 0..sb.raw().inode_bitmap_blocks.get() {
        dev.read_block(start.saturating_add(k), buf).ok()?;
        let base = k.saturating_mul(32768);
        let here = bits.saturating_sub(base).min(32768);
        for i in 0..here {
            let byte = buf.get(usize::try_from(i / 8).ok()?)?;
            if byte & (1u8 << (i % 8)) == 0 {
                free = free.saturating_add(1);
            }
        }
    }
    Some(free)
}
