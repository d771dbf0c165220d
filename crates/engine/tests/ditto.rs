//! Ditto copies of metadata: how many a block gets and where they lie.
//!
//! Pins issue 11, item 4. Before it, the two copies of the MOS root and of
//! the space checkpoint were allocated back to back (4 KiB apart), so 8 KiB
//! of damage destroyed both and the pool could not be imported, not even
//! with a rewind; and file indirect blocks, dnode blocks and directories had
//! one copy, so 16 KiB over an indirect block lost a whole 40 MiB file and
//! 4 MiB over the metadata area lost every file of a pool. Now metadata has
//! one copy more than data (`redundant_metadata=all`, the default), pool-wide
//! metadata three, and the copies of one block lie on different vdevs or at
//! least min(1/8 of the device, 16 MiB) apart (the allocator aims for 1/8);
//! these tests overwrite regions the size the issue names over each copy in
//! turn and require that nothing is lost and the newest txg imports without
//! a rewind.

mod common;

use std::sync::Arc;

use common::{first_difference, mount, pattern};
use tarn_engine::pool::label::read_labels;
use tarn_engine::posix::{Caller, FileSystem, Ino};
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::Pool;
use tarn_ondisk::bp::{BlockPtr, Dva};
use tarn_ondisk::uberblock::Uberblock;

const ROOT: Caller = Caller::new(0, 0, 1, 0);
const MIB: u64 = 1 << 20;

/// A pool "tank" on one in-memory device of `size` bytes.
fn pool_on(size: u64, seed: u64, props: &[(&str, &str)]) -> (Vec<Arc<FaultDevice>>, Pool) {
    common::pool_with(1, size, seed, props)
}

/// Imports without a rewind (no `-F`).
fn import(devs: &[Arc<FaultDevice>]) -> tarn_engine::Result<Pool> {
    common::open(devs)
}

/// The newest uberblock on the device.
fn newest_uberblock(dev: &FaultDevice) -> Uberblock {
    read_labels(dev).uberblocks.into_iter().max_by_key(|u| u.txg).expect("an uberblock")
}

/// Overwrites `[offset, offset + len)` (clipped to the device) with
/// pseudo-random bytes, as the reproductions did with `dd`.
fn smash(dev: &FaultDevice, offset: u64, len: u64, seed: u64) {
    let start = offset.min(dev.size_bytes());
    let end = (offset + len).min(dev.size_bytes());
    dev.write_at(&pattern((end - start) as usize, seed), start).expect("write");
    dev.flush().expect("flush");
}

/// Regions of `len` bytes over copy `dva` and its neighbourhood: one
/// starting half a region before it, one starting at it, one ending at its
/// end. Copies 4 KiB apart, as they were, fall together into the first two.
fn regions_over(dva: &Dva, len: u64) -> Vec<(u64, u64)> {
    let end = dva.offset + dva.asize;
    vec![(dva.offset.saturating_sub(len / 2), len), (dva.offset, len), (end.saturating_sub(len), len)]
}

fn copies(bp: &BlockPtr) -> Vec<Dva> {
    bp.dva.iter().filter(|d| !d.is_empty()).copied().collect()
}

/// An object that must read back: its number, content and blocks.
struct Want {
    obj: u64,
    data: Vec<u8>,
    blocks: Vec<BlockPtr>,
}

impl Want {
    fn of(pool: &Pool, obj: u64, data: Vec<u8>) -> Want {
        let blocks = pool.root().tree(obj, 100_000).expect("tree").into_iter().map(|t| t.2).collect();
        Want { obj, data, blocks }
    }

    /// Whether `[off, off + len)` held every copy of one of its blocks
    /// (data blocks have one copy: damage to them is loss the test allows).
    fn held_by(&self, off: u64, len: u64) -> bool {
        self.blocks.iter().any(|bp| copies(bp).iter().all(|c| overlaps(c, off, len)))
    }
}

/// Objects written over several txgs (some in the last one), the pool
/// exported: what each object must read back.
fn exported_pool_with_objects(pool: Pool) -> Vec<Want> {
    let mut objs = Vec::new();
    for i in 0..6u64 {
        let data = pattern(3000 + 7000 * i as usize, i);
        objs.push((common::put(&pool, &data), data));
        pool.sync().expect("sync");
    }
    let want = objs.into_iter().map(|(obj, data)| Want::of(&pool, obj, data)).collect();
    pool.export().expect("export");
    want
}

/// Damages each region in turn on a fresh copy of the exported image;
/// each time the newest txg must import without a rewind and every object
/// read back as written, but for one whose own block (one copy: data) the
/// region held. Returns how many regions held such a block.
fn survives_each(devs: &[Arc<FaultDevice>], regions: &[(u64, u64)], want: &[Want], what: &str) -> usize {
    let txg = newest_uberblock(&devs[0]).txg;
    let mut regions_with_loss = 0;
    for (k, &(off, len)) in regions.iter().enumerate() {
        let img = common::durable(devs);
        smash(&img[0], off, len, 77 + k as u64);
        let pool = import(&img).unwrap_or_else(|e| panic!("{what}: {len} bytes at {off:#x}: the pool does not import: {e}"));
        assert_eq!(pool.uberblock().txg, txg, "{what}: {len} bytes at {off:#x}: import rewound");
        let mut data_lost = false;
        for w in want {
            match pool.root().read(w.obj, 0, w.data.len()) {
                Ok(got) => assert!(got == w.data, "{what}: object {}: {}", w.obj, first_difference(&got, &w.data)),
                Err(_) if w.held_by(off, len) => data_lost = true,
                Err(e) => panic!("{what}: {len} bytes at {off:#x}: object {}: {e}", w.obj),
            }
        }
        let rep = pool.verify().expect("verify");
        assert!(data_lost || rep.errors.is_empty(), "{what}: {len} bytes at {off:#x}: {:?}", rep.errors);
        regions_with_loss += usize::from(data_lost);
        pool.export().expect("export");
    }
    regions_with_loss
}

fn overlaps(dva: &Dva, off: u64, len: u64) -> bool {
    dva.offset < off + len && off < dva.offset + dva.asize
}

/// Issue 11 item 4: 8 KiB over the MOS root's copies made the pool
/// unimportable (its two copies sat 4 KiB apart).
#[test]
fn eight_kib_over_the_mos_root_loses_nothing() {
    let (devs, pool) = pool_on(256 * MIB, 1, &[]);
    let want = exported_pool_with_objects(pool);
    let ub = newest_uberblock(&devs[0]);
    let cs = copies(&ub.mos);
    assert!(cs.len() >= 2, "the MOS root has {} copies", cs.len());
    let regions: Vec<(u64, u64)> = cs.iter().flat_map(|d| regions_over(d, 8 << 10)).collect();
    let _ = survives_each(&devs, &regions, &want, "MOS root");
}

/// Issue 11 item 4: 8 KiB over the space checkpoint's copies made the pool
/// unimportable even with `-F` (every older uberblock names the same
/// checkpoint).
#[test]
fn eight_kib_over_the_space_checkpoint_loses_nothing() {
    let (devs, pool) = pool_on(256 * MIB, 2, &[]);
    let want = exported_pool_with_objects(pool);
    let ub = newest_uberblock(&devs[0]);
    let mut regions = Vec::new();
    for bp in [ub.space_cp, ub.space_log] {
        for d in copies(&bp) {
            regions.extend(regions_over(&d, 8 << 10));
        }
    }
    assert!(copies(&ub.space_cp).len() >= 2, "the space checkpoint has {} copies", copies(&ub.space_cp).len());
    let _ = survives_each(&devs, &regions, &want, "space checkpoint");
}

/// Issue 11 item 4: 16 KiB over the indirect block of a 40 MiB file lost the
/// whole file (file indirect blocks had one copy).
#[test]
fn sixteen_kib_over_a_files_indirect_block_loses_nothing() {
    let (devs, pool) = pool_on(256 * MIB, 3, &[]);
    let data = pattern(40 << 20, 9);
    let obj = common::put(&pool, &data);
    pool.sync().expect("sync");
    let tree = pool.root().tree(obj, 100_000).expect("tree");
    let l1: Vec<BlockPtr> = tree.iter().filter(|(l, _, _)| *l == 1).map(|t| t.2).collect();
    assert_eq!(l1.len(), 1, "a 40 MiB file of 128 KiB records has one indirect block");
    let want = Want::of(&pool, obj, data);
    pool.export().expect("export");
    let regions: Vec<(u64, u64)> = copies(&l1[0]).iter().flat_map(|d| regions_over(d, 16 << 10)).collect();
    // The file's data blocks (large) lie apart from its indirect block
    // (small), so no region may lose any of it.
    assert_eq!(survives_each(&devs, &regions, &[want], "indirect block"), 0);
}

/// The control for the test above: with `redundant_metadata=none` the
/// indirect block has one copy, as every file's had before, and the same
/// damage loses the whole file (while the pool's own metadata, three copies
/// apart, still imports).
#[test]
fn without_redundant_metadata_the_same_damage_loses_the_file() {
    let (devs, pool) = pool_on(256 * MIB, 3, &[("redundant_metadata", "none")]);
    let obj = common::put(&pool, &pattern(40 << 20, 9));
    pool.sync().expect("sync");
    let tree = pool.root().tree(obj, 100_000).expect("tree");
    let l1 = tree.iter().find(|(l, _, _)| *l == 1).expect("an indirect block").2;
    assert_eq!(copies(&l1).len(), 1);
    pool.export().expect("export");
    smash(&devs[0], l1.dva[0].offset, 16 << 10, 5);
    let pool = import(&devs).expect("import");
    let e = pool.root().read(obj, 0, 4096).expect_err("the file's indirect block is gone");
    assert_eq!(e.kind, tarn_engine::ErrorKind::Corrupt, "{e}");
}

/// A file written through the POSIX layer: (name, inode, content).
type File = (String, Ino, Vec<u8>);

/// 300 files in one directory: 280 of 1 KiB (stored in their dnodes) and 20
/// of 40 KiB (a data block each). Returns the exported devices and the
/// files' (name, inode, content).
fn three_hundred_files(seed: u64) -> (Vec<Arc<FaultDevice>>, Vec<File>) {
    let (devs, pool) = pool_on(256 * MIB, seed, &[]);
    let fs = mount(&pool);
    let d = fs.mkdir(&ROOT, fs.root(), b"d", 0o755).expect("mkdir").ino;
    let mut files = Vec::new();
    for i in 0..300u64 {
        let name = format!("f{i:03}");
        let ino = fs.mknod(&ROOT, d, name.as_bytes(), libc::S_IFREG | 0o644, 0).expect("mknod").ino;
        let data = pattern(if i % 15 == 0 { 40 << 10 } else { 1024 }, i);
        fs.write(&ROOT, ino, 0, &data).expect("write");
        files.push((name, ino, data));
        if i % 100 == 99 {
            fs.sync_all().expect("sync");
        }
    }
    drop(fs);
    pool.export().expect("export");
    (devs, files)
}


/// Issue 11 item 4: 4 MiB over the metadata area of a pool of 300 files lost
/// all of them and suspended the pool. Each region is centred on a copy of
/// a block every file depends on (the dataset's root block, its dnode
/// blocks, the directory's blocks); only a file whose own data block the
/// region held may fail, and the pool must go on writing.
#[test]
fn four_mib_over_the_metadata_area_loses_no_file() {
    let (devs, files) = three_hundred_files(4);
    let (regions, data_bps) = {
        let pool = import(&devs).expect("import");
        let os = pool.root();
        let fs = mount(&pool);
        let dir_obj = fs.lookup(fs.root(), b"d").expect("d").ino;
        drop(fs);
        let mut key: Vec<BlockPtr> = vec![os.root_bp()];
        key.extend(os.tree(0, 1000).expect("dnode array").into_iter().map(|t| t.2));
        key.extend(os.tree(dir_obj, 1000).expect("directory").into_iter().map(|t| t.2));
        let data_bps: Vec<(Ino, Vec<BlockPtr>)> =
            files.iter().map(|(_, ino, _)| (*ino, os.tree(*ino, 1000).expect("file").into_iter().map(|t| t.2).collect())).collect();
        let mut regions: Vec<(u64, u64)> = Vec::new();
        for bp in &key {
            for d in copies(bp) {
                let r = (d.offset.saturating_sub(2 * MIB) & !4095, 4 * MIB);
                if !regions.contains(&r) {
                    regions.push(r);
                }
            }
        }
        pool.export().expect("export");
        (regions, data_bps)
    };
    assert!(regions.len() >= 2, "regions: {regions:?}");
    for (k, &(off, len)) in regions.iter().enumerate() {
        let img = common::durable(&devs);
        smash(&img[0], off, len, 1000 + k as u64);
        let pool = import(&img).unwrap_or_else(|e| panic!("4 MiB at {off:#x}: the pool does not import: {e}"));
        let fs = mount(&pool);
        let d = fs.lookup(fs.root(), b"d").unwrap_or_else(|e| panic!("4 MiB at {off:#x}: directory: {e:?}")).ino;
        let mut lost = Vec::new();
        for ((name, ino, data), (_, bps)) in files.iter().zip(&data_bps) {
            let held = bps.iter().any(|bp| copies(bp).iter().all(|c| overlaps(c, off, len)));
            let read = fs.lookup(d, name.as_bytes()).and_then(|a| Ok((a.ino, fs.read(a.ino, 0, data.len() as u32 + 1)?)));
            match read {
                Ok((i, got)) if &got == data && i == *ino => {}
                _ if held => {}
                other => lost.push(format!("{name}: {:?}", other.map(|(_, g)| first_difference(&g, data)))),
            }
        }
        assert!(lost.is_empty(), "4 MiB at {off:#x}: {} of 300 files lost: {:?}", lost.len(), &lost[..lost.len().min(5)]);
        let f = fs.mknod(&ROOT, d, b"after", libc::S_IFREG | 0o644, 0).expect("create after the damage").ino;
        fs.write(&ROOT, f, 0, b"still writing").expect("write after the damage");
        fs.sync_all().unwrap_or_else(|e| panic!("4 MiB at {off:#x}: sync after the damage: {e:?}"));
        assert_eq!(pool.status().state, "ONLINE", "4 MiB at {off:#x}");
        drop(fs);
        pool.export().expect("export");
    }
}

/// Copies of each block of `obj` by (level, copies).
fn copies_by_level(pool: &Pool, obj: u64) -> Vec<(u8, usize)> {
    let mut v: Vec<(u8, usize)> = pool.root().tree(obj, 100_000).expect("tree").iter().map(|(l, _, bp)| (*l, copies(bp).len())).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// `redundant_metadata` decides which metadata blocks get a copy more than
/// the data, as OpenZFS's `dmu_write_policy`: `all` every one, `most` all
/// but files' level-1 indirect blocks, `some` only critical metadata (not
/// dnode blocks, not directories), `none` none; at most three. The pool's
/// own metadata (MOS, space maps) has three whatever the datasets say.
#[test]
fn redundant_metadata_decides_which_blocks_get_a_copy_more() {
    // (value, copies): file L0, file L1, file L2, dnode block, directory,
    // key/value map, object-set root.
    let cases: [(&str, &str, [usize; 7]); 5] = [
        ("all", "1", [1, 2, 2, 2, 2, 2, 2]),
        ("most", "1", [1, 1, 2, 2, 2, 2, 2]),
        ("some", "1", [1, 1, 1, 1, 1, 2, 2]),
        ("none", "1", [1, 1, 1, 1, 1, 1, 1]),
        ("all", "2", [2, 3, 3, 3, 3, 3, 3]),
    ];
    for (value, n, want) in cases {
        let (_devs, pool) = pool_on(128 * MIB, 5, &[("redundant_metadata", value), ("copies", n), ("recordsize", "4K")]);
        let os = pool.root().clone();
        let tx = os.begin().unwrap();
        let file = os.create(&tx, tarn_ondisk::ObjectType::PlainData).unwrap();
        os.write(&tx, file, 0, &pattern(64 << 10, 1)).unwrap();
        os.write(&tx, file, 5 << 20, &pattern(64 << 10, 2)).unwrap();
        let dir = os.create(&tx, tarn_ondisk::ObjectType::Directory).unwrap();
        os.write(&tx, dir, 0, &pattern(64 << 10, 3)).unwrap();
        let map = os.create(&tx, tarn_ondisk::ObjectType::KvMap).unwrap();
        os.write(&tx, map, 0, &pattern(64 << 10, 4)).unwrap();
        drop(tx);
        pool.sync().unwrap();
        let at = |obj: u64, level: u8| -> Vec<usize> { copies_by_level(&pool, obj).into_iter().filter(|c| c.0 == level).map(|c| c.1).collect() };
        let got = [
            at(file, 0),
            at(file, 1),
            at(file, 2),
            at(0, 0),
            at(dir, 0),
            at(map, 0),
            vec![copies(&os.root_bp()).len()],
        ];
        let want: Vec<Vec<usize>> = want.iter().map(|w| vec![*w]).collect();
        assert_eq!(got.to_vec(), want, "redundant_metadata={value} copies={n}: file L0, L1, L2, dnode, directory, map, root");
        // The pool's own metadata: three copies of every block.
        let mos_root = pool.uberblock().mos;
        assert_eq!(copies(&mos_root).len(), 3, "MOS root");
        assert!(pool.mos().tree(0, 1000).unwrap().iter().all(|(_, _, bp)| copies(bp).len() == 3), "MOS dnode blocks");
        assert_eq!(copies(&pool.uberblock().space_cp).len(), 3, "space checkpoint");
        let rep = common::verified(&pool, value);
        assert_eq!(rep.near_copies, 0, "{:?}", rep.near_copy_examples);
    }
}

/// A populated pool of `ndevs` devices of `size` bytes: files of every
/// size (inline, one block, indirect), directories, a snapshot,
/// overwrites and deletes over many txgs.
fn populated(ndevs: usize, size: u64, dirs: u64) -> (Vec<Arc<FaultDevice>>, Pool) {
    let (devs, pool) = common::pool_with(ndevs, size, 11, &[]);
    let fs = mount(&pool);
    let mut rng = common::Rng::new(12);
    let mut files: Vec<Ino> = Vec::new();
    for d in 0..dirs {
        let dir = fs.mkdir(&ROOT, fs.root(), format!("d{d}").as_bytes(), 0o755).expect("mkdir").ino;
        for i in 0..150 {
            let ino = fs.mknod(&ROOT, dir, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).expect("mknod").ino;
            let len = match rng.below(10) {
                0 => rng.range(200 << 10, 1 << 20),
                1..=3 => rng.range(4 << 10, 100 << 10),
                _ => rng.range(1, 2000),
            };
            fs.write(&ROOT, ino, 0, &pattern(len as usize, rng.next_u64())).expect("write");
            files.push(ino);
        }
        fs.sync_all().expect("sync");
        if d == 1 {
            pool.datasets().snapshot("tank@s").expect("snapshot");
        }
    }
    for _ in 0..200 {
        let ino = files[rng.below(files.len() as u64) as usize];
        fs.write(&ROOT, ino, rng.below(64 << 10), &pattern(5000, rng.next_u64())).expect("overwrite");
    }
    fs.sync_all().expect("sync");
    drop(fs);
    (devs, pool)
}

/// The placement invariant over every block pointer of populated pools:
/// copies of one block on different vdevs, or on one vdev at least
/// `ditto_min_distance` apart (the checker's `near_copies`).
#[test]
fn every_blocks_copies_lie_apart() {
    for (ndevs, size, dirs) in [(1, 256 * MIB, 8), (1, 80 * MIB, 3), (2, 128 * MIB, 8)] {
        let (_devs, pool) = populated(ndevs, size, dirs);
        let rep = common::verified(&pool, "populated");
        assert_eq!(rep.near_copies, 0, "{ndevs} × {size}: {:?}", rep.near_copy_examples);
        assert_eq!(pool.core().near_copies.load(std::sync::atomic::Ordering::Relaxed), 0);
        // Not vacuous: most metadata has two copies, the pool's own three.
        let c = rep.blocks_by_copies;
        assert!(c[1] > 100 && c[2] > 100 && c[3] >= 5, "{ndevs} × {size}: blocks by copies {c:?}");
        pool.export().expect("export");
    }
}
