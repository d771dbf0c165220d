//! Device labels: how a device says which pool it belongs to.
//!
//! Every leaf device carries four identical 256 KiB labels, two at the front and
//! two at the end, so that overwriting either end of a device (a stray `dd`, a
//! partition table written over it) leaves two intact copies. A label holds
//!
//! ```text
//!   0 KiB ..  16 KiB  config: magic, version, the pool identity and the whole
//!                     vdev tree, checksummed with BLAKE3 (last 32 bytes)
//!  16 KiB .. 128 KiB  reserved (zero)
//! 128 KiB .. 256 KiB  uberblock ring: slots of max(4 KiB, sector) bytes;
//!                     txg t goes to slot t % slots
//! ```
//!
//! The config changes rarely (create, export, import, adding a device). It is
//! rewritten in two phases — labels 0 and 2, flush, then 1 and 3 — so a crash
//! tears at most one pair. Uberblocks change every txg and go to all four rings.
//!
//! Config layout (little-endian; strings are u16 length + UTF-8):
//!
//! ```text
//! magic "TARNLBL1" (8) | config_version u32 | payload_len u32 | payload | zero pad
//! ... | blake3(bytes 0 .. 16 KiB-32) (32)
//! payload = pool_guid u64 | pool_name str | state u8 | config_txg u64
//!         | format_version u64 | features_incompat u64 | features_compat u64
//!         | hostname str | device_guid u64 | top_guid u64 | vdev tree
//!         [ | nspares u16 | spare leaf node × nspares     (hot spares; absent: none)
//!           [ | nlogs u16 | log top-level vdev id u32 × nlogs ] ]
//!                                          (log vdevs; nspares is then 0 … 64)
//! vdev node = kind u8 | id u32 | guid u64 | ashift u8 | nparity u8
//!           | asize u64 | metaslab_shift u8 | path str | nchildren u16 | children…
//! ```
//!
//! A pool's hot spares are listed after the tree (leaf nodes, `id` their
//! place in the list), in the labels of every device of the pool and of
//! every spare; an available spare's own label has state SPARE and its
//! own guid as `device_guid`, so it says whose spare it is.
//!
//! A pool's separate intent-log devices (log vdevs, zpool's `log` class)
//! are top-level vdevs of the tree like any other — a log block pointer's
//! vdev number names one — listed by id after the spares (the spare count
//! is then written even when it is 0): the allocator serves only
//! intent-log blocks from them.
//!
//! A removed top-level vdev that was not the last leaves a *hole* (kind 9,
//! OpenZFS's hole vdev) in its place, so the ids after it — the vdev
//! numbers of their DVAs — stay valid: no children, no space, guid 0; never
//! the last top-level vdev (`check_holes`).

use crate::codec::{DecodeError, Reader, Writer};

pub const LABEL_SIZE: u64 = 256 << 10;
pub const LABEL_COUNT: usize = 4;
pub const CONFIG_SIZE: usize = 16 << 10;
pub const UB_RING_OFFSET: u64 = 128 << 10;
pub const UB_RING_SIZE: u64 = 128 << 10;
/// Front and back label areas together; the rest of a device is allocatable.
pub const LABELS_FRONT: u64 = 2 * LABEL_SIZE;
pub const LABELS_BACK: u64 = 2 * LABEL_SIZE;
/// Smallest device tarn accepts: labels plus 64 MiB of space.
pub const MIN_DEVICE_BYTES: u64 = LABELS_FRONT + LABELS_BACK + (64 << 20);

const MAGIC: &[u8; 8] = b"TARNLBL1";
const CONFIG_VERSION: u32 = 1;
const MAX_NAME: usize = 255;
const MAX_PATH: usize = 4096;
const MAX_CHILDREN: usize = 256;
/// Root, top-level vdev, spare, replacing, leaf: a device standing in for
/// another (a hot spare) whose original is being replaced sits four levels
/// below the root.
const MAX_DEPTH: usize = 4;
/// Hot spares a pool may list.
pub const MAX_SPARES: usize = 64;
/// Log vdevs a pool may have.
pub const MAX_LOGS: usize = 64;

/// The device size tarn uses: labels are placed at 256 KiB boundaries.
pub fn usable_device_size(raw: u64) -> u64 {
    raw & !(LABEL_SIZE - 1)
}

/// Byte offset of label `i` (0..4) on a device of `dev_size` bytes.
pub fn label_offset(i: usize, dev_size: u64) -> u64 {
    let size = usable_device_size(dev_size);
    match i {
        0 => 0,
        1 => LABEL_SIZE,
        2 => size - 2 * LABEL_SIZE,
        _ => size - LABEL_SIZE,
    }
}

/// Size of one uberblock slot for a device of this ashift.
pub fn ub_slot_size(ashift: u8) -> u64 {
    (1u64 << ashift).max(4096)
}

pub fn ub_slot_count(ashift: u8) -> u64 {
    UB_RING_SIZE / ub_slot_size(ashift)
}

/// Byte offset on the device of the ring slot for `txg` in label `i`.
pub fn ub_slot_offset(i: usize, dev_size: u64, ashift: u8, txg: u64) -> u64 {
    let slot = txg % ub_slot_count(ashift);
    label_offset(i, dev_size) + UB_RING_OFFSET + slot * ub_slot_size(ashift)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum VdevKind {
    Root = 0,
    File = 1,
    Disk = 2,
    Mirror = 3,
    Raidz = 4,
    /// An L2ARC cache device.
    Cache = 5,
    /// A separate intent-log device.
    Log = 6,
    /// A device being replaced and its replacement (two children), until
    /// the replacement is resilvered.
    Replacing = 7,
    /// A device and the hot spare standing in for it (two children): a
    /// mirror of the two until the administrator detaches one of them.
    Spare = 8,
    /// The place of a removed top-level vdev (OpenZFS's VDEV_TYPE_HOLE):
    /// keeps the ids of the top-level vdevs after it, which DVAs name. No
    /// children, no space, guid 0 (feature *hole vdevs*).
    Hole = 9,
}

impl VdevKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        use VdevKind::*;
        Some(match v {
            0 => Root,
            1 => File,
            2 => Disk,
            3 => Mirror,
            4 => Raidz,
            5 => Cache,
            6 => Log,
            7 => Replacing,
            8 => Spare,
            9 => Hole,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        use VdevKind::*;
        match self {
            Root => "root",
            File => "file",
            Disk => "disk",
            Mirror => "mirror",
            Raidz => "raidz",
            Cache => "cache",
            Log => "log",
            Replacing => "replacing",
            Spare => "spare",
            Hole => "hole",
        }
    }
    pub fn is_leaf(self) -> bool {
        matches!(self, VdevKind::File | VdevKind::Disk)
    }
}

/// One node of the vdev tree: root → top-level vdevs → leaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VdevNode {
    pub kind: VdevKind,
    /// Position among its siblings; for a top-level vdev, its DVA vdev number.
    pub id: u32,
    pub guid: u64,
    pub ashift: u8,
    pub nparity: u8,
    /// Allocatable bytes (top-level vdevs), or the device size (leaves).
    pub asize: u64,
    pub metaslab_shift: u8,
    /// The path the leaf was last opened at (a hint: import matches by guid).
    pub path: String,
    pub children: Vec<VdevNode>,
}

impl VdevNode {
    /// The hole left at top-level id `id` by a removed vdev (`ashift`:
    /// the pool's, as every node needs one in range).
    pub fn hole(id: u32, ashift: u8) -> VdevNode {
        VdevNode { kind: VdevKind::Hole, id, guid: 0, ashift, nparity: 0, asize: 0, metaslab_shift: 0, path: String::new(), children: vec![] }
    }

    pub fn is_hole(&self) -> bool {
        self.kind == VdevKind::Hole
    }

    pub fn leaves(&self) -> Vec<&VdevNode> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(n) = stack.pop() {
            if n.kind.is_leaf() {
                out.push(n);
            }
            for c in n.children.iter().rev() {
                stack.push(c);
            }
        }
        out
    }

    /// Sum of all guids in the tree; an uberblock records it so that an import
    /// with a device missing or swapped is noticed.
    pub fn guid_sum(&self) -> u64 {
        let mut s = self.guid;
        for c in &self.children {
            s = s.wrapping_add(c.guid_sum());
        }
        s
    }

    fn encode(&self, w: &mut Writer) {
        w.u8(self.kind as u8);
        w.u32(self.id);
        w.u64(self.guid);
        w.u8(self.ashift);
        w.u8(self.nparity);
        w.u64(self.asize);
        w.u8(self.metaslab_shift);
        w.string(&self.path);
        w.u16(self.children.len() as u16);
        for c in &self.children {
            c.encode(w);
        }
    }

    fn decode(r: &mut Reader, depth: usize) -> Result<Self, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(r.err("vdev tree too deep"));
        }
        let kind = VdevKind::from_u8(r.u8()?).ok_or_else(|| r.err("unknown vdev kind"))?;
        let id = r.u32()?;
        let guid = r.u64()?;
        let ashift = r.u8()?;
        if !(9..=16).contains(&ashift) {
            return Err(r.err(format!("ashift {} out of range 9..=16", ashift)));
        }
        let nparity = r.u8()?;
        let asize = r.u64()?;
        let metaslab_shift = r.u8()?;
        let path = r.string(MAX_PATH)?;
        let n = r.u16()? as usize;
        if n > MAX_CHILDREN {
            return Err(r.err(format!("{} children exceeds {}", n, MAX_CHILDREN)));
        }
        let mut children = Vec::with_capacity(n.min(16));
        for _ in 0..n {
            children.push(VdevNode::decode(r, depth + 1)?);
        }
        Ok(VdevNode { kind, id, guid, ashift, nparity, asize, metaslab_shift, path, children })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PoolState {
    Active = 0,
    Exported = 1,
    Destroyed = 2,
    /// The label of an available hot spare: the device is no leaf of the
    /// pool's tree, but listed among its spares.
    Spare = 3,
}

impl PoolState {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(PoolState::Active),
            1 => Some(PoolState::Exported),
            2 => Some(PoolState::Destroyed),
            3 => Some(PoolState::Spare),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            PoolState::Active => "ACTIVE",
            PoolState::Exported => "EXPORTED",
            PoolState::Destroyed => "DESTROYED",
            PoolState::Spare => "SPARE",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelConfig {
    pub pool_guid: u64,
    pub pool_name: String,
    pub state: PoolState,
    /// txg at which this config was written; the newest valid one wins.
    pub config_txg: u64,
    pub format_version: u64,
    /// Features a reader must understand to open the pool at all.
    pub features_incompat: u64,
    /// Features a reader may ignore when opening read-only.
    pub features_compat: u64,
    pub hostname: String,
    /// guid of the device carrying this label.
    pub device_guid: u64,
    /// guid of the top-level vdev that device belongs to.
    pub top_guid: u64,
    pub tree: VdevNode,
    /// The pool's hot spares (leaf nodes), available or in use: an in-use
    /// spare is also a leaf of `tree`, under a spare node.
    pub spares: Vec<VdevNode>,
    /// The ids of the top-level vdevs that are separate intent-log devices
    /// (log vdevs), ascending.
    pub logs: Vec<u32>,
}

impl LabelConfig {
    /// Encodes into the 16 KiB config region, checksum included.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let mut p = Writer::new();
        check_holes(&self.tree).map_err(|e| e.to_string())?;
        self.encode_head_and_tree(&mut p);
        if !self.spares.is_empty() || !self.logs.is_empty() {
            if self.spares.len() > MAX_SPARES {
                return Err(format!("{} hot spares exceed {}", self.spares.len(), MAX_SPARES));
            }
            p.u16(self.spares.len() as u16);
            for s in &self.spares {
                if !s.kind.is_leaf() || !s.children.is_empty() {
                    return Err(format!("hot spare {:016x} is a {} node, not a device", s.guid, s.kind.name()));
                }
                s.encode(&mut p);
            }
        }
        if !self.logs.is_empty() {
            check_logs(&self.logs, &self.tree).map_err(|e| e.to_string())?;
            p.u16(self.logs.len() as u16);
            for id in &self.logs {
                p.u32(*id);
            }
        }
        let payload = p.into_vec();
        if payload.len() > CONFIG_SIZE - 16 - 32 {
            return Err(format!("vdev config of {} bytes does not fit in a label", payload.len()));
        }
        Ok(seal(&payload))
    }

    /// The payload's fields up to and including the vdev tree.
    fn encode_head_and_tree(&self, p: &mut Writer) {
        p.u64(self.pool_guid);
        p.string(&self.pool_name);
        p.u8(self.state as u8);
        p.u64(self.config_txg);
        p.u64(self.format_version);
        p.u64(self.features_incompat);
        p.u64(self.features_compat);
        p.string(&self.hostname);
        p.u64(self.device_guid);
        p.u64(self.top_guid);
        self.tree.encode(p);
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let what = "label config";
        if b.len() < CONFIG_SIZE {
            return Err(DecodeError::new(what, "truncated"));
        }
        let b = &b[..CONFIG_SIZE];
        if &b[0..8] != MAGIC {
            return Err(DecodeError::new(what, "no tarn label magic"));
        }
        let sum = blake3::hash(&b[..CONFIG_SIZE - 32]);
        if sum.as_bytes() != &b[CONFIG_SIZE - 32..] {
            return Err(DecodeError::new(what, "checksum mismatch"));
        }
        let mut r = Reader::new(&b[8..CONFIG_SIZE - 32], what);
        let version = r.u32()?;
        if version != CONFIG_VERSION {
            return Err(r.err(format!("unsupported config version {}", version)));
        }
        let len = r.u32()? as usize;
        let mut r = Reader::new(r.bytes(len)?, what);
        let pool_guid = r.u64()?;
        let pool_name = r.string(MAX_NAME)?;
        let state = PoolState::from_u8(r.u8()?).ok_or_else(|| r.err("unknown pool state"))?;
        let cfg = LabelConfig {
            pool_guid,
            pool_name,
            state,
            config_txg: r.u64()?,
            format_version: r.u64()?,
            features_incompat: r.u64()?,
            features_compat: r.u64()?,
            hostname: r.string(MAX_NAME)?,
            device_guid: r.u64()?,
            top_guid: r.u64()?,
            tree: VdevNode::decode(&mut r, 0)?,
            spares: Vec::new(),
            logs: Vec::new(),
        };
        if cfg.tree.kind != VdevKind::Root {
            return Err(DecodeError::new(what, "vdev tree does not start at a root"));
        }
        check_holes(&cfg.tree).map_err(|e| r.err(e))?;
        let mut cfg = cfg;
        cfg.spares = decode_spares(&mut r)?;
        cfg.logs = decode_logs(&mut r, &cfg.tree)?;
        Ok(cfg)
    }
}

/// The 16 KiB config region holding `payload` (at most `CONFIG_SIZE - 48`
/// bytes): magic, version, length, payload, zeros, checksum.
fn seal(payload: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(CONFIG_SIZE);
    w.bytes(MAGIC);
    w.u32(CONFIG_VERSION);
    w.u32(payload.len() as u32);
    w.bytes(payload);
    w.zeros(CONFIG_SIZE - 32 - w.len());
    let sum = blake3::hash(&w.buf);
    w.bytes(sum.as_bytes());
    w.into_vec()
}

/// The log vdev list after the spares: none when the payload ends there.
fn decode_logs(r: &mut Reader, tree: &VdevNode) -> Result<Vec<u32>, DecodeError> {
    if r.remaining() == 0 {
        return Ok(Vec::new());
    }
    let n = r.u16()? as usize;
    if n == 0 || n > MAX_LOGS {
        return Err(r.err(format!("{} log vdevs (1 to {} when listed)", n, MAX_LOGS)));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(r.u32()?);
    }
    check_logs(&out, tree).map_err(|e| r.err(e))?;
    Ok(out)
}

/// A log list names top-level vdevs of the tree, ascending, each once, and
/// leaves at least one that is not a log vdev (the pool's own blocks need
/// one).
fn check_logs(logs: &[u32], tree: &VdevNode) -> Result<(), String> {
    if logs.len() > MAX_LOGS {
        return Err(format!("{} log vdevs exceed {}", logs.len(), MAX_LOGS));
    }
    if logs.windows(2).any(|w| w[0] >= w[1]) {
        return Err("log vdev ids not ascending".into());
    }
    for id in logs {
        let Some(top) = tree.children.get(*id as usize) else {
            return Err(format!("log vdev {} is not a top-level vdev", id));
        };
        if !matches!(top.kind, VdevKind::File | VdevKind::Disk | VdevKind::Mirror | VdevKind::Replacing | VdevKind::Spare) {
            return Err(format!("log vdev {} is a {} vdev (a device or a mirror)", id, top.kind.name()));
        }
    }
    if logs.len() >= tree.children.iter().filter(|t| !t.is_hole()).count() {
        return Err("every top-level vdev is a log vdev".into());
    }
    Ok(())
}

/// Holes (feature *hole vdevs*) are top-level vdevs only, empty (no
/// children, no space, guid 0), each at its own id, and never the last
/// top-level vdev (removing the last one trims the holes before it).
fn check_holes(tree: &VdevNode) -> Result<(), String> {
    for (i, top) in tree.children.iter().enumerate() {
        if top.is_hole() {
            if !top.children.is_empty() || top.asize != 0 || top.guid != 0 {
                return Err(format!("hole vdev {} is not empty", top.id));
            }
            if top.id as usize != i {
                return Err(format!("hole vdev {} at place {} of the tree", top.id, i));
            }
        }
        let mut stack: Vec<&VdevNode> = top.children.iter().collect();
        while let Some(n) = stack.pop() {
            if n.is_hole() {
                return Err(format!("a hole below top-level vdev {}", top.id));
            }
            stack.extend(n.children.iter());
        }
    }
    if tree.children.last().is_some_and(|t| t.is_hole()) {
        return Err("the last top-level vdev is a hole".into());
    }
    Ok(())
}

/// The hot spares after the tree: none when the payload ends there (a
/// count of 0 when a log list follows).
fn decode_spares(r: &mut Reader) -> Result<Vec<VdevNode>, DecodeError> {
    if r.remaining() == 0 {
        return Ok(Vec::new());
    }
    let n = r.u16()? as usize;
    if n == 0 && r.remaining() > 0 {
        return Ok(Vec::new());
    }
    if n == 0 || n > MAX_SPARES {
        return Err(r.err(format!("{} hot spares (1 to {} when listed)", n, MAX_SPARES)));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        // A spare is a leaf: one level below where the root would be.
        let s = VdevNode::decode(r, MAX_DEPTH)?;
        if !s.kind.is_leaf() || !s.children.is_empty() {
            return Err(r.err(format!("hot spare {:016x} is a {} node, not a device", s.guid, s.kind.name())));
        }
        out.push(s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> LabelConfig {
        let leaf = |id, guid, path: &str| VdevNode {
            kind: VdevKind::File,
            id,
            guid,
            ashift: 12,
            nparity: 0,
            asize: 1 << 33,
            metaslab_shift: 26,
            path: path.into(),
            children: vec![],
        };
        LabelConfig {
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
            tree: VdevNode {
                kind: VdevKind::Root,
                id: 0,
                guid: 0x1234,
                ashift: 12,
                nparity: 0,
                asize: 0,
                metaslab_shift: 0,
                path: String::new(),
                children: vec![leaf(0, 11, "/srv/a.img"), leaf(1, 12, "/srv/b.img")],
            },
            spares: vec![],
            logs: vec![],
        }
    }

    #[test]
    fn round_trip() {
        let c = sample();
        let b = c.encode().unwrap();
        assert_eq!(b.len(), CONFIG_SIZE);
        assert_eq!(LabelConfig::decode(&b).unwrap(), c);
        assert_eq!(c.tree.leaves().len(), 2);
    }

    /// A config with hot spares, one of them in use under a spare node
    /// whose original is being replaced (the deepest tree tarn writes).
    fn with_spares() -> LabelConfig {
        let mut c = sample();
        let leaf = |id, guid, path: &str| VdevNode { kind: VdevKind::File, id, guid, ashift: 12, nparity: 0, asize: 1 << 33, metaslab_shift: 26, path: path.into(), children: vec![] };
        let interior = |kind, id, guid, children| VdevNode { kind, id, guid, ashift: 12, nparity: 0, asize: 1 << 33, metaslab_shift: 26, path: String::new(), children };
        let replacing = interior(VdevKind::Replacing, 0, 40, vec![leaf(0, 12, "/srv/b.img"), leaf(1, 13, "/srv/new.img")]);
        let spare = interior(VdevKind::Spare, 1, 41, vec![replacing, leaf(1, 30, "/srv/s1.img")]);
        c.tree.children = vec![interior(VdevKind::Mirror, 0, 42, vec![leaf(0, 11, "/srv/a.img"), spare])];
        c.spares = vec![leaf(0, 30, "/srv/s1.img"), leaf(1, 31, "/srv/s2.img")];
        c
    }

    #[test]
    fn round_trip_with_spares() {
        let c = with_spares();
        assert_eq!(LabelConfig::decode(&c.encode().unwrap()).unwrap(), c);
        let mut s = c.clone();
        s.state = PoolState::Spare;
        s.device_guid = 31;
        s.top_guid = 0;
        assert_eq!(LabelConfig::decode(&s.encode().unwrap()).unwrap(), s);
    }

    #[test]
    fn spares_are_leaves_and_bounded() {
        let mut c = with_spares();
        c.spares[0].kind = VdevKind::Mirror;
        assert!(c.encode().is_err(), "an interior node is no hot spare");
        let mut c = with_spares();
        c.spares = (0..=MAX_SPARES as u32).map(|i| VdevNode { id: i, guid: 100 + i as u64, ..c.spares[0].clone() }).collect();
        assert!(c.encode().is_err(), "more spares than MAX_SPARES");
        // A listed count of zero is not how "no spares" is written.
        let mut w = Writer::new();
        w.u16(0);
        assert!(decode_spares(&mut Reader::new(&w.into_vec(), "t")).is_err());
        // A spare with children is refused on read too.
        let mut w = Writer::new();
        w.u16(1);
        with_spares().tree.children[0].encode(&mut w);
        assert!(decode_spares(&mut Reader::new(&w.into_vec(), "t")).is_err());
    }

    #[test]
    fn round_trip_with_logs() {
        // Logs without spares: a spare count of 0, then the list.
        let mut c = sample();
        c.logs = vec![1];
        assert_eq!(LabelConfig::decode(&c.encode().unwrap()).unwrap(), c);
        // With spares.
        let mut c = with_spares();
        let log = VdevNode { id: 1, guid: 77, path: "/srv/log.img".into(), ..c.spares[0].clone() };
        c.tree.children.push(log);
        c.logs = vec![1];
        assert_eq!(LabelConfig::decode(&c.encode().unwrap()).unwrap(), c);
    }

    #[test]
    fn bad_log_lists_are_refused() {
        let mut c = sample();
        c.logs = vec![0, 1];
        assert!(c.encode().is_err(), "every top-level vdev a log vdev");
        c.logs = vec![2];
        assert!(c.encode().is_err(), "no such top-level vdev");
        c.tree.children.push(VdevNode { id: 2, guid: 13, ..c.tree.children[0].clone() });
        c.logs = vec![2, 1];
        assert!(c.encode().is_err(), "not ascending");
        c.tree.children[2].kind = VdevKind::Raidz;
        c.logs = vec![2];
        assert!(c.encode().is_err(), "a RAID-Z log vdev");
        // On read: a list naming a vdev that is not there.
        let mut w = Writer::new();
        w.u16(1);
        w.u32(5);
        assert!(decode_logs(&mut Reader::new(&w.into_vec(), "t"), &sample().tree).is_err());
        let mut w = Writer::new();
        w.u16(0);
        assert!(decode_logs(&mut Reader::new(&w.into_vec(), "t"), &sample().tree).is_err());
    }

    /// A pool whose log vdev 1 was removed: a hole in its place, log vdev
    /// 2 after it.
    fn with_hole() -> LabelConfig {
        let mut c = sample();
        let log = VdevNode { id: 2, guid: 13, path: "/srv/log.img".into(), ..c.tree.children[0].clone() };
        c.tree.children[1] = VdevNode::hole(1, 12);
        c.tree.children.push(log);
        c.logs = vec![2];
        c
    }

    #[test]
    fn round_trip_with_hole() {
        let c = with_hole();
        assert_eq!(LabelConfig::decode(&c.encode().unwrap()).unwrap(), c);
        assert_eq!(c.tree.leaves().len(), 2, "a hole has no leaves");
        // A data vdev after the hole, no log vdev.
        let mut c = with_hole();
        c.logs.clear();
        assert_eq!(LabelConfig::decode(&c.encode().unwrap()).unwrap(), c);
    }

    #[test]
    fn bad_holes_are_refused() {
        let mut c = with_hole();
        c.tree.children.pop();
        c.logs.clear();
        assert!(c.encode().is_err(), "a hole as the last top-level vdev");
        let mut c = with_hole();
        c.tree.children[1].guid = 5;
        assert!(c.encode().is_err(), "a hole with a guid");
        let mut c = with_hole();
        let leaf = c.tree.children[0].clone();
        c.tree.children[1].children.push(leaf);
        assert!(c.encode().is_err(), "a hole with a child");
        let mut c = with_hole();
        c.tree.children[1].id = 7;
        assert!(c.encode().is_err(), "a hole out of its place");
        let mut c = with_hole();
        c.logs = vec![1, 2];
        assert!(c.encode().is_err(), "a hole listed as a log vdev");
        let mut c = with_hole();
        c.logs = vec![0, 2];
        assert!(c.encode().is_err(), "every top-level vdev that is not a hole a log vdev");
        let mut c = with_spares();
        c.tree.children[0].children[0] = VdevNode::hole(0, 12);
        assert!(c.encode().is_err(), "a hole below a top-level vdev");
        // On read, behind a valid checksum: a trailing hole.
        let mut c = with_hole();
        c.tree.children.pop();
        c.logs.clear();
        assert!(LabelConfig::decode(&sealed_unchecked(&c)).is_err());
        assert!(LabelConfig::decode(&sealed_unchecked(&with_hole())).is_ok());
    }

    /// `c` encoded as `encode` does but without its checks (no spares or
    /// logs), with a valid checksum: what a damaged or hostile writer leaves.
    fn sealed_unchecked(c: &LabelConfig) -> Vec<u8> {
        let mut p = Writer::new();
        c.encode_head_and_tree(&mut p);
        if !c.logs.is_empty() {
            p.u16(0);
            p.u16(c.logs.len() as u16);
            c.logs.iter().for_each(|id| p.u32(*id));
        }
        seal(&p.into_vec())
    }

    #[test]
    fn detects_corruption() {
        let mut b = sample().encode().unwrap();
        b[100] ^= 1;
        assert!(LabelConfig::decode(&b).is_err());
        let b = vec![0u8; CONFIG_SIZE];
        assert!(LabelConfig::decode(&b).is_err());
    }

    #[test]
    fn offsets() {
        let size = 1u64 << 30;
        assert_eq!(label_offset(0, size), 0);
        assert_eq!(label_offset(3, size), size - LABEL_SIZE);
        assert_eq!(ub_slot_count(12), 32);
        assert_eq!(ub_slot_offset(0, size, 12, 33), UB_RING_OFFSET + 4096);
    }
}
