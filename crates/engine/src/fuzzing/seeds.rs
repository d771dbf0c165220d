//! Valid encodings for every target, made by the production encoders: the
//! smoke test's starting points and the cargo-fuzz seed corpus
//! (`fuzz/gen-seeds.sh` writes them out). Each is laid out the way its body
//! reads input, e.g. label and uberblock seeds are the checksummed bytes
//! after the magic.

use std::collections::BTreeMap;

use tarn_ondisk::bp::{BlockPtr, ChecksumType, Compression, Dva, ObjectType, BP_SIZE, EMBEDDED_MAX};
use tarn_ondisk::codec::{le_u32, Writer};
use tarn_ondisk::dnode::{Dnode, ObjsetPhys, ObjsetType, DNODE_BLOCK_SIZE, SLOT_SIZE};
use tarn_ondisk::kv;
use tarn_ondisk::label::{LabelConfig, PoolState, VdevKind, VdevNode};
use tarn_ondisk::uberblock::{Uberblock, FORMAT_VERSION};

use crate::io::compress::{self, CompressSetting};
use crate::pool::alloc::spacelog::{self, Checkpoint, Extent, TxgRecords, VdevCheckpoint};

/// Block pointers of every shape: hole, embedded, compressed, multi-copy.
fn sample_bps() -> Vec<BlockPtr> {
    let mut data = BlockPtr::hole(131072, ObjectType::PlainData, 0);
    data.dva[0] = Dva { vdev: 1, asize: 65536, offset: 1 << 30 };
    data.psize = 60000;
    data.compress = Compression::Lz4;
    data.checksum = ChecksumType::Fletcher4;
    data.birth = 42;
    data.fill = 1;
    data.cksum = [7; 32];

    let mut ind = data;
    ind.otype = ObjectType::DnodeArray;
    ind.level = 2;
    ind.lsize = 131072;
    ind.psize = 131072;
    ind.compress = Compression::Off;
    ind.checksum = ChecksumType::Blake3;
    ind.fill = 5000;
    for (i, d) in ind.dva.iter_mut().enumerate() {
        *d = Dva { vdev: i as u32, asize: 131072, offset: (i as u64 + 3) << 24 };
    }

    let mut embedded = BlockPtr::hole(4096, ObjectType::KvMap, 0);
    let mut e = [0u8; EMBEDDED_MAX];
    for (i, x) in e.iter_mut().enumerate() {
        *x = i as u8;
    }
    embedded.embedded = Some(e);
    embedded.psize = 60;
    embedded.compress = Compression::Zstd;
    embedded.birth = 9;
    embedded.fill = 1;

    // A cloned block: logical birth of the clone, physical birth of the data.
    let mut cloned = data;
    cloned.birth = 50;
    cloned.phys_birth = 42;

    vec![BlockPtr::hole(512, ObjectType::PlainData, 0), data, ind, embedded, cloned]
}

pub fn blockptr() -> Vec<Vec<u8>> {
    sample_bps().iter().map(|bp| bp.to_bytes().to_vec()).collect()
}

fn vdev(kind: VdevKind, id: u32, guid: u64, path: &str, children: Vec<VdevNode>) -> VdevNode {
    VdevNode {
        kind,
        id,
        guid,
        ashift: 12,
        nparity: if kind == VdevKind::Raidz { 1 } else { 0 },
        asize: 1 << 33,
        metaslab_shift: 26,
        path: path.into(),
        children,
    }
}

fn sample_labels() -> Vec<LabelConfig> {
    let file = |id, guid, path: &str| vdev(VdevKind::File, id, guid, path, vec![]);
    let disk = |id, guid, path: &str| vdev(VdevKind::Disk, id, guid, path, vec![]);
    let simple = LabelConfig {
        pool_guid: 0x1234,
        pool_name: "tank".into(),
        state: PoolState::Active,
        config_txg: 4,
        format_version: 1,
        features_incompat: 0,
        features_compat: 0,
        hostname: "host".into(),
        device_guid: 11,
        top_guid: 11,
        tree: vdev(VdevKind::Root, 0, 0x1234, "", vec![file(0, 11, "/srv/a.img"), file(1, 12, "/srv/b.img")]),
        spares: vec![],
        logs: vec![],
    };
    // The deepest tree tarn writes: root → mirror → spare → replacing →
    // disks (a hot spare in use whose original is being replaced).
    let replacing = vdev(VdevKind::Replacing, 0, 23, "", vec![disk(0, 22, "/dev/sdb"), disk(1, 24, "/dev/sdf")]);
    let spare = vdev(VdevKind::Spare, 1, 25, "", vec![replacing, disk(1, 26, "/dev/sdg")]);
    let mirror = vdev(VdevKind::Mirror, 0, 20, "", vec![disk(0, 21, "/dev/sda"), spare]);
    let raidz = vdev(
        VdevKind::Raidz,
        1,
        30,
        "",
        vec![disk(0, 31, "/dev/sdc"), disk(1, 32, "/dev/sdd"), disk(2, 33, "/dev/sde")],
    );
    let cache = vdev(VdevKind::Cache, 2, 40, "", vec![disk(0, 41, "/dev/nvme0n1")]);
    // A mirrored log vdev (listed in `logs`).
    let log = vdev(VdevKind::Mirror, 3, 50, "", vec![disk(0, 53, "/dev/nvme1n1"), disk(1, 54, "/dev/nvme2n1")]);
    let nested = LabelConfig {
        pool_name: "ünïcode-pool".into(),
        state: PoolState::Exported,
        hostname: String::new(),
        device_guid: 32,
        top_guid: 30,
        tree: vdev(VdevKind::Root, 0, 0x99, "", vec![mirror, raidz, cache, log]),
        spares: vec![disk(0, 26, "/dev/sdg"), disk(1, 27, "/dev/sdh")],
        logs: vec![3],
        ..simple.clone()
    };
    // An available hot spare's own label.
    let spare_label = LabelConfig { state: PoolState::Spare, device_guid: 27, top_guid: 0, ..nested.clone() };
    // A log vdev removed before a data vdev and another log vdev: a hole
    // keeps their ids (feature *hole vdevs*).
    let holed = LabelConfig {
        features_incompat: tarn_ondisk::uberblock::FEATURE_LOG_VDEVS | tarn_ondisk::uberblock::FEATURE_HOLE_VDEVS,
        tree: vdev(VdevKind::Root, 0, 0x1234, "", vec![file(0, 11, "/srv/a.img"), VdevNode::hole(1, 12), file(2, 12, "/srv/b.img"), file(3, 13, "/srv/log.img")]),
        logs: vec![3],
        ..simple.clone()
    };
    vec![simple, nested, spare_label, holed]
}

/// Label seeds: the checksummed bytes after the magic, up to the payload's end.
pub fn label() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = sample_labels()
        .iter()
        .map(|c| {
            let enc = c.encode().expect("sample configs fit");
            let end = 16 + le_u32(&enc, 12) as usize;
            enc[8..end].to_vec()
        })
        .collect();
    // The first sample with a hot spare listed after its tree: flipping the
    // spare's child count from 0 to 1 gives it a child, which the decoder
    // must refuse.
    let mut slack = out.first().expect("samples exist").clone();
    let mut w = Writer::new();
    w.u16(1);
    w.u8(VdevKind::Disk as u8);
    w.u32(0);
    w.u64(60);
    w.u8(12);
    w.u8(0);
    w.u64(1 << 33);
    w.u8(26);
    w.string("/dev/extra");
    w.u16(0);
    slack.extend_from_slice(&w.buf);
    let payload_len = (slack.len() - 8) as u32;
    slack[4..8].copy_from_slice(&payload_len.to_le_bytes());
    out.push(slack);
    out
}

/// Uberblock seeds: the bytes after the magic up to the checksum (sealed by
/// the body), plus one complete encoding (checked as is).
pub fn uberblock() -> Vec<Vec<u8>> {
    let bps = sample_bps();
    let ub = Uberblock {
        version: FORMAT_VERSION,
        txg: 77,
        guid_sum: 5,
        timestamp: 1_700_000_000,
        pool_guid: 9,
        mos: bps[2],
        space_log: bps[1],
        space_cp: BlockPtr::default(),
        space_cp_txg: 70,
        features_active: 3,
    };
    let other = Uberblock { mos: bps[3], space_log: bps[0], space_cp: bps[1], ..ub.clone() };
    let mut out: Vec<Vec<u8>> = [&ub, &other].iter().map(|u| u.encode()[8..480].to_vec()).collect();
    out.push(ub.encode().to_vec());
    out
}

fn encode_dnode(d: &Dnode) -> Vec<u8> {
    let mut b = vec![0u8; d.slots() * SLOT_SIZE];
    d.encode(&mut b);
    b
}

/// Dnode seeds: dnodes with a block pointer, bonus and inline data (short and
/// long forms), and an object-set root both complete and as the body after
/// its magic.
pub fn dnode() -> Vec<Vec<u8>> {
    let mut block = Dnode::new(ObjectType::PlainData, 1 << 20, 5);
    block.bonus = vec![1, 2, 3];
    block.maxblkid = 99;
    block.size = 100 << 20;
    block.nlevels = 2;
    block.blkptr = Some(sample_bps()[1]);
    let mut inline = Dnode::new(ObjectType::Directory, 131072, 6);
    inline.blkptr = None;
    inline.nlevels = 0;
    inline.inline = Some((0..300u32).map(|i| i as u8).collect());
    inline.size = 300;
    inline.bonus = vec![9; 40];
    let os = ObjsetPhys {
        ostype: ObjsetType::Dataset,
        meta_dnode: Dnode::new(ObjectType::DnodeArray, DNODE_BLOCK_SIZE as u32, 1),
        next_object: 300,
        object_count: 12,
        used_bytes: 1 << 20,
    };
    // An inline dnode in the long form (a generation the short one cannot hold).
    let long_inline = Dnode { gen: 1 << 48, ..inline.clone() };
    let os_bytes = os.encode();
    vec![
        encode_dnode(&block),
        encode_dnode(&inline),
        encode_dnode(&long_inline),
        encode_dnode(&Dnode::new(ObjectType::KvMap, 16384, 1)),
        os_bytes[8..232].to_vec(),
        os_bytes,
    ]
}

pub fn kv() -> Vec<Vec<u8>> {
    let mut m = kv::KvMap::new();
    kv::put_u64(&mut m, "root_dataset", 5);
    kv::put_str(&mut m, "prop:comment", "hello");
    m.insert("empty".into(), vec![]);
    let mut big = BTreeMap::new();
    for i in 0..20u32 {
        big.insert(format!("key{i:03}"), vec![i as u8; i as usize]);
    }
    vec![kv::encode(&kv::KvMap::new()), kv::encode(&m), kv::encode(&big)]
}

pub fn spacelog() -> Vec<Vec<u8>> {
    let ext = |vdev, offset, len| Extent { vdev, offset, len };
    let records = TxgRecords {
        txg: 77,
        allocs: vec![ext(0, 4 << 20, 128 << 10), ext(0, (4 << 20) + (132 << 10), 4096), ext(1, 1 << 30, 512)],
        frees: vec![ext(1, 8192, 8192), ext(0, u64::MAX - 4095, 4096)],
    };
    let checkpoint = Checkpoint {
        txg: 70,
        vdevs: vec![
            VdevCheckpoint {
                vdev: 0,
                start: 4 << 20,
                size: 1 << 30,
                ashift: 12,
                free: vec![(4 << 20, 1 << 20), (8 << 20, 64 << 20)],
                deferred: vec![(69, 2 << 20, 4096), (69, 3 << 20, 8192), (70, 5 << 20, 4096)],
            },
            VdevCheckpoint { vdev: 3, start: 0, size: 1 << 28, ashift: 9, free: vec![(512, 1024)], deferred: vec![] },
        ],
    };
    vec![
        spacelog::encode_records(&TxgRecords::default()),
        spacelog::encode_records(&records),
        spacelog::encode_checkpoint(&Checkpoint::default()),
        spacelog::encode_checkpoint(&checkpoint),
    ]
}

/// A block body input: mode byte, logical size, payload.
fn block_input(mode: u8, lsize: usize, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![mode];
    v.extend_from_slice(&(lsize as u32).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// Block seeds: one compressible block compressed each way, one stored raw.
pub fn block_decode() -> Vec<Vec<u8>> {
    let logical: Vec<u8> = (0..8192u32).map(|i| (i % 23) as u8 ^ (i / 512) as u8).collect();
    let mut out = vec![block_input(0b0000_0100, 1000, &logical[..1000])];
    // mode: compression in bits 0-1, fletcher4 in bits 2-3.
    for (mode, setting) in [(0b0000_0101u8, CompressSetting::Lz4), (0b0010_0110, CompressSetting::Zstd(3))] {
        let c = compress::compress(setting, &logical, 512).expect("the sample compresses");
        out.push(block_input(mode, logical.len(), &c));
    }
    out
}

/// Indirect block seeds: the first pointers of a block (the body fills the
/// rest of the 128 KiB with holes).
pub fn indirect() -> Vec<Vec<u8>> {
    let bps = sample_bps();
    let mut all = Vec::with_capacity(bps.len() * BP_SIZE);
    for bp in &bps {
        all.extend_from_slice(&bp.to_bytes());
    }
    vec![bps[1].to_bytes().to_vec(), all]
}

/// L2ARC seeds: a sealed header's field bytes, and log blocks with zero,
/// one and several entries.
pub fn l2arc() -> Vec<Vec<u8>> {
    use crate::arc::l2;
    let mut out = vec![l2::seal_header(&[7u8; 88])];
    let mut bp = BlockPtr::hole(4096, ObjectType::PlainData, 0);
    bp.psize = 4096;
    bp.birth = 9;
    bp.fill = 1;
    bp.dva[0] = tarn_ondisk::bp::Dva { vdev: 0, asize: 4096, offset: 1 << 20 };
    for n in [0usize, 1, 5] {
        let entries: Vec<(BlockPtr, u64)> = (0..n).map(|i| (bp, 4096 * (i as u64 + 1))).collect();
        out.push(l2::encode_log(3, (8192, 4096, [1; 32]), &entries, 72 + n * 136));
    }
    out
}

/// A table header and buckets (empty, one entry, full).
pub fn brt() -> Vec<Vec<u8>> {
    use tarn_ondisk::brt::{encode_bucket, BrtEntry, BrtHeader, BrtKey, BUCKET_ENTRIES_MAX};
    let e = |i: u64| BrtEntry { key: BrtKey { vdev: (i % 3) as u32, offset: i << 17 }, asize: 131072, refcount: 1 + i % 5 };
    let mut full: Vec<BrtEntry> = (0..BUCKET_ENTRIES_MAX as u64).map(e).collect();
    full.sort_by_key(|e| e.key);
    vec![
        BrtHeader { nbuckets: 64, entries: 2, used_bytes: 1 << 18, saved_bytes: 3 << 17 }.encode(),
        encode_bucket(&[]),
        encode_bucket(&[e(7)]),
        encode_bucket(&full),
    ]
}

/// A window for each signature `sys::probe` knows, behind the window byte
/// (0: head, 1: tail).
pub fn probe() -> Vec<Vec<u8>> {
    let at = |pick: u8, len: usize, parts: &[(usize, &[u8])]| {
        let mut v = vec![0u8; 1 + len];
        v[0] = pick;
        for (o, m) in parts {
            v[1 + o..1 + o + m.len()].copy_from_slice(m);
        }
        v
    };
    // ext4: 100 inodes, 32768 blocks per group, the magic, extents|filetype.
    let ext4 = at(0, 2048, &[(1024, &[100, 0, 0, 0]), (1024 + 32, &[0, 0x80, 0, 0]), (1024 + 56, &[0x53, 0xef]), (1024 + 96, &[0x42, 0, 0, 0])]);
    vec![
        at(0, 8, &[(0, b"TARNLBL1")]),
        at(1, 8, &[(0, b"TARNLBL1")]),
        at(0, 8, &[(0, b"TARNL2C1")]),
        at(0, (128 << 10) + 8, &[(128 << 10, &0x00ba_b10c_u64.to_le_bytes())]),
        at(0, 8, &[(0, b"XFSB"), (4, &4096u32.to_be_bytes())]),
        ext4,
        at(0, (64 << 10) + 72, &[((64 << 10) + 64, b"_BHRfS_M")]),
        at(0, 4096, &[(4086, b"SWAPSPACE2")]),
        at(0, 512, &[(82, b"FAT32   "), (510, &[0x55, 0xaa])]),
        at(0, 1024, &[(512, b"EFI PART")]),
        at(0, 512, &[(446, &[0x80]), (450, &[0x83]), (458, &[0, 8, 0, 0]), (510, &[0x55, 0xaa])]),
        at(0, 1024, &[(512, b"LABELONE"), (536, b"LVM2 001")]),
    ]
}

pub fn event() -> Vec<Vec<u8>> {
    use tarn_ondisk::event::{EventRecord, FieldValue, TEXT_MAX};
    let plain = EventRecord { time_ns: 0, class: "sysevent.fs.zfs.pool_create".into(), fields: vec![] };
    let full = EventRecord {
        time_ns: 1_795_318_361_000_000_123,
        class: "ereport.fs.zfs.checksum".into(),
        fields: vec![
            ("vdev_path".into(), FieldValue::Text("/dev/sdb".into())),
            ("vdev_guid".into(), FieldValue::Hex(0x1234_5678_9abc_def0)),
            ("zio_level".into(), FieldValue::Dec(0)),
            ("zio_err".into(), FieldValue::Text("x".repeat(TEXT_MAX))),
        ],
    };
    vec![plain.encode(), full.encode()]
}

/// The pointer an indirect write record carries: one copy of a 128 KiB
/// data block, compressed.
fn indirect_bp() -> tarn_ondisk::bp::BlockPtr {
    use tarn_ondisk::bp::{BlockPtr, ChecksumType, Compression, Dva, ObjectType};
    let mut bp = BlockPtr::hole(1 << 17, ObjectType::PlainData, 0);
    bp.dva[0] = Dva { vdev: 0, asize: 40 << 10, offset: 8 << 20 };
    bp.psize = 40 << 10;
    bp.compress = Compression::Lz4;
    bp.checksum = ChecksumType::Blake3;
    bp.birth = 5;
    bp.fill = 1;
    bp.cksum = [3; 32];
    bp
}

/// A log header, single records of every kind, and record runs as a sealed
/// block's body (a 2-byte count, then the records).
pub fn zil() -> Vec<Vec<u8>> {
    use tarn_ondisk::codec::Writer;
    use tarn_ondisk::zil::{set, LogPtr, LogRecord, LogTime, Record, SetattrRec, ZilHeader};
    let t = LogTime { sec: 1_700_000_000, nsec: 5 };
    let recs = vec![
        LogRecord::Create { parent: 2, ino: 64, gen: 9, mode: 0o100644, uid: 1, gid: 2, rdev: 0, time: t, name: b"a".to_vec(), target: vec![] },
        LogRecord::Link { ino: 64, parent: 2, time: t, name: b"b".to_vec() },
        LogRecord::Remove { parent: 2, dir: false, time: t, name: b"b".to_vec() },
        LogRecord::Rename { parent: 2, newparent: 5, flags: 1, time: t, name: b"a".to_vec(), newname: b"c".to_vec() },
        LogRecord::Write { ino: 64, offset: 4096, fsetid: true, time: t, data: vec![7; 100] },
        LogRecord::Setattr { ino: 64, fsetid: false, time: t, set: SetattrRec { mask: set::MODE | set::SIZE, mode: 0o600, size: 9, ..Default::default() } },
        LogRecord::Fallocate { ino: 64, offset: 0, len: 8192, flags: 3, fsetid: false, time: t },
        LogRecord::Xattr { ino: 64, how: 1, time: t, name: b"user.x".to_vec(), value: Some(b"v".to_vec()) },
        LogRecord::KeepSize { ino: 64, size: 1 << 20 },
        LogRecord::WriteIndirect { ino: 64, offset: 1 << 17, len: 1 << 17, fsetid: false, time: t, bp: indirect_bp() },
    ];
    let recs: Vec<Record> = recs.into_iter().enumerate().map(|(i, rec)| Record { seq: i as u64 + 1, txg: 5, more: false, rec }).collect();
    let mut out = vec![ZilHeader { guid: 9, first: LogPtr { vdev: 0, size: 8192, offset: 1 << 20, asize: 8192, seq: 3 }, claim_txg: 4, replay_seq: 2 }.encode()];
    let mut body = Writer::new();
    body.u16(recs.len() as u16);
    for r in &recs {
        let mut w = Writer::new();
        r.encode(&mut w);
        out.push(w.into_vec());
        r.encode(&mut body);
    }
    out.push(body.into_vec());
    out
}

