//! `tarn inspect`: the pool's on-disk structures, like zdb — uberblocks,
//! configuration, objects, and one object's block tree level by level.

use clap::Args;
use tarn_engine::{Error, Result, Tunables};
use tarn_ondisk::bp::BlockPtr;

use crate::fmt;
use crate::pool_cmd;

#[derive(Args)]
pub struct InspectArgs {
    pub pool: String,
    /// An object of the root dataset: show its dnode and block tree
    pub object: Option<u64>,
    /// Walk and verify every block (checksums, allocation, leaks)
    #[arg(long)]
    pub verify: bool,
    /// Most objects / block pointers to list
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
}

pub fn describe_bp(bp: &BlockPtr) -> String {
    if bp.is_embedded() {
        return format!("EMBEDDED lsize={} psize={} comp={} birth={}", bp.lsize, bp.psize, bp.compress.name(), bp.birth);
    }
    if bp.is_hole() {
        return format!("HOLE lsize={}", bp.lsize);
    }
    let dvas: Vec<String> = bp.dva.iter().filter(|d| !d.is_empty()).map(|d| format!("{}:{:#x}:{:#x}", d.vdev, d.offset, d.asize)).collect();
    let ck: String = bp.cksum[..8].iter().map(|b| format!("{:02x}", b)).collect();
    format!(
        "{} lsize={} psize={} comp={} birth={} fill={} cksum={}:{}…",
        dvas.join(" "),
        bp.lsize,
        bp.psize,
        bp.compress.name(),
        bp.birth,
        bp.fill,
        bp.checksum.name(),
        ck
    )
}

/// Every device's labels: which verify, and the uberblocks in their rings.
fn print_labels(pool: &tarn_engine::Pool) {
    use std::collections::BTreeMap;
    for (_, v) in pool.core().leaves() {
        let Some(leaf) = v.leaf() else { continue };
        let l = tarn_engine::pool::label::read_labels(leaf.device().as_ref());
        let bad: Vec<String> = l.bad.iter().map(|(i, why)| format!("label {}: {}", i, why)).collect();
        println!("device {} ({}): {} of 4 labels valid{}", v.id(), v.path, 4 - l.bad.len(), if bad.is_empty() { String::new() } else { format!(" — {}", bad.join("; ")) });
        let mut by_txg: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
        for ub in &l.uberblocks {
            let e = by_txg.entry(ub.txg).or_insert((ub.timestamp, 0));
            e.1 += 1;
        }
        let newest: Vec<String> = by_txg.iter().rev().take(8).map(|(txg, (ts, n))| format!("txg {} (t={}, {} copies)", txg, ts, n)).collect();
        println!("  uberblocks: {} in the rings; newest: {}", l.uberblocks.len(), newest.join(", "));
    }
}

pub fn run(a: InspectArgs, t: &Tunables) -> Result<()> {
    let pool = pool_cmd::open(&a.pool, true, t)?;
    if a.verify {
        let rep = pool.verify()?;
        println!("verified txg {}: {} blocks ({} embedded), {} objects, {} referenced, {} allocated", rep.txg, rep.blocks, rep.embedded_blocks, rep.objects, fmt::size(rep.referenced_bytes), fmt::size(rep.allocated_bytes));
        if rep.brt_entries > 0 {
            println!(
                "block cloning: {} shared blocks ({} pointers more), {} used, {} saved",
                rep.brt_entries,
                rep.extra_references,
                fmt::size(rep.brt_used_bytes),
                fmt::size(rep.brt_saved_bytes)
            );
        }
        let c = rep.blocks_by_copies;
        println!("copies: {} blocks with one, {} with two, {} with three", c[1], c[2], c[3]);
        if rep.near_copies > 0 {
            println!("WARNING: {} blocks have copies nearer each other than the allocator's minimum distance (a full vdev); one damaged region may take all of them:", rep.near_copies);
            for e in &rep.near_copy_examples {
                println!("  {}", e);
            }
        }
        for e in &rep.errors {
            println!("ERROR: {}", e);
        }
        if !rep.errors.is_empty() {
            return Err(Error::corrupt(format!("{} errors found", rep.errors.len())));
        }
        return Ok(());
    }
    let os = pool.root();
    if let Some(obj) = a.object {
        // Object 0 is the dnode array itself, described by the object-set root.
        let (d, slots) = if obj == 0 {
            (os.meta_dnode(), 3)
        } else {
            let info = os.info(obj)?;
            (info.dnode, info.slots)
        };
        println!("object {} of '{}': type={} size={} blksz={} maxblksz={} levels={} maxblkid={} used={} slots={} gen={}{}", obj, pool.name(), d.otype.name(), d.size, d.datablksz, d.maxblksz, d.nlevels, d.maxblkid, d.used_bytes, slots, d.gen, if d.inline.is_some() { " INLINE" } else { "" });
        for (level, idx, bp) in os.tree(obj, a.limit)? {
            println!("  L{} {:>8}  {}", level, idx, describe_bp(&bp));
        }
        return Ok(());
    }
    let ub = pool.uberblock();
    println!("pool '{}' guid {} txg {} timestamp {}", pool.name(), pool.guid(), ub.txg, ub.timestamp);
    println!("  mos:        {}", describe_bp(&ub.mos));
    println!("  space cp:   {} (txg {})", describe_bp(&ub.space_cp), ub.space_cp_txg);
    println!("  space log:  {}", describe_bp(&ub.space_log));
    print_labels(&pool);
    let cfg = pool.config();
    println!("config: state {} config_txg {} host '{}'", cfg.state.name(), cfg.config_txg, cfg.hostname);
    for c in &cfg.tree.children {
        println!("  vdev {} {} guid {:016x} ashift {} asize {} metaslab_shift {} path {}", c.id, c.kind.name(), c.guid, c.ashift, fmt::size(c.asize), c.metaslab_shift, c.path);
    }
    for s in &cfg.spares {
        println!("  spare {} guid {:016x} asize {} path {}", s.id, s.guid, fmt::size(s.asize), s.path);
    }
    println!("objects of '{}':", pool.name());
    let rows: Vec<Vec<String>> = os
        .list(a.limit)?
        .into_iter()
        .map(|(o, d)| vec![o.to_string(), d.otype.name().to_string(), d.size.to_string(), d.datablksz.to_string(), d.nlevels.to_string(), d.used_bytes.to_string(), if d.inline.is_some() { "inline".into() } else { "-".into() }])
        .collect();
    print!("{}", fmt::table(&["OBJECT", "TYPE", "SIZE", "BLKSZ", "LEVELS", "USED", "INLINE"], &rows, false));
    Ok(())
}
