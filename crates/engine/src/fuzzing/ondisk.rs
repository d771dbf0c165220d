//! Bodies for the decoders of `tarn-ondisk`: block pointers, labels,
//! uberblocks, dnodes and object-set roots, key/value maps, the block
//! reference table, event records.

use tarn_ondisk::bp::{BlockPtr, BP_SIZE, EMBEDDED_MAX, MAX_DVAS};
use tarn_ondisk::brt::{decode_bucket, encode_bucket, BrtHeader, BRT_BLOCK_SIZE, BUCKET_ENTRIES_MAX};
use tarn_ondisk::codec::{le_u32, put_u64};
use tarn_ondisk::dnode::{Dnode, ObjsetPhys, DNODE_HEADER, FLAG_SHORT, OBJSET_PHYS_SIZE, SHORT_HEADER, SLOT_SIZE};
use tarn_ondisk::event::{EventRecord, FIELDS_MAX};
use tarn_ondisk::kv;
use tarn_ondisk::label::{LabelConfig, VdevNode, CONFIG_SIZE};
use tarn_ondisk::uberblock::{Uberblock, UB_MAGIC, UB_SIZE};

use super::Outcome;

/// `label.rs`'s magic (private there); the label seeds come from
/// `LabelConfig::encode`, so a change there fails the smoke test at once.
const LABEL_MAGIC: &[u8; 8] = b"TARNLBL1";
/// `dnode.rs`'s object-set magic ("tarnobjs"), private there.
const OBJSET_MAGIC: u64 = 0x736a_626f_6e72_6174;
/// `kv.rs`'s magic, private there.
const KV_MAGIC: &[u8; 4] = b"TKV1";
/// Bytes of a label config the checksum covers, less the magic.
const LABEL_BODY_MAX: usize = CONFIG_SIZE - 8 - 32;
/// Bytes of an uberblock the checksum covers, less the magic.
const UB_BODY_MAX: usize = 480 - 8;
/// Where an uberblock keeps its three block pointers.
const UB_BP_OFFSETS: [usize; 3] = [48, 176, 304];

/// Zeroes the bytes of an encoded block pointer that no field occupies
/// (61..64 always; 120..128 unless the payload is embedded there): the
/// decoder ignores them, so they are the only bytes a re-encoding may change.
pub(super) fn clear_bp_reserved(b: &mut [u8]) {
    assert_eq!(b.len(), BP_SIZE);
    b[61..64].fill(0);
    let embedded = b[60] & 1 != 0;
    if !embedded {
        b[120..128].fill(0);
    }
}

/// Block pointer decoder.
pub fn blockptr(data: &[u8]) -> Outcome {
    match BlockPtr::decode(data) {
        Ok(bp) => {
            check_bp(&bp, &data[..BP_SIZE]);
            Outcome::Accepted
        }
        Err(_) => Outcome::Rejected,
    }
}

/// A decoded pointer is valid, and re-encodes to the bytes it came from except
/// for reserved bytes, and to a value equal to itself.
pub(super) fn check_bp(bp: &BlockPtr, raw: &[u8]) {
    assert!(bp.validate().is_ok(), "decode returned a pointer that validate() rejects: {bp:?}");
    assert!(bp.ndvas() <= MAX_DVAS);
    let _ = bp.asize_total();
    if let Some(p) = bp.embedded_payload() {
        assert!(p.len() <= EMBEDDED_MAX);
        assert_eq!(p.len(), bp.psize as usize);
    }
    if bp.phys_birth != 0 {
        assert!(bp.physical_birth() <= bp.birth && !bp.is_hole() && !bp.is_embedded(), "a physical birth the decoder should refuse: {bp:?}");
    }
    let enc = bp.to_bytes();
    assert_eq!(BlockPtr::decode(&enc).as_ref(), Ok(bp));
    let mut expect = [0u8; BP_SIZE];
    expect.copy_from_slice(raw);
    clear_bp_reserved(&mut expect);
    assert_eq!(enc, expect, "re-encoding changed more than the reserved bytes");
}

/// A 16 KiB label config region holding `body` (version, payload length,
/// payload …) behind the magic, sealed with a correct checksum.
pub(super) fn seal_label(body: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; CONFIG_SIZE];
    b[..8].copy_from_slice(LABEL_MAGIC);
    let n = body.len().min(LABEL_BODY_MAX);
    b[8..8 + n].copy_from_slice(&body[..n]);
    let sum = blake3::hash(&b[..CONFIG_SIZE - 32]);
    b[CONFIG_SIZE - 32..].copy_from_slice(sum.as_bytes());
    b
}

/// Label config decoder: the raw input (checksum path), then the input sealed.
pub fn label(data: &[u8]) -> Outcome {
    let raw = LabelConfig::decode(data).map(|c| check_label(&c, data)).is_ok();
    let region = seal_label(data);
    let sealed = LabelConfig::decode(&region).map(|c| check_label(&c, &region)).is_ok();
    Outcome::from_any(&[raw, sealed])
}

fn check_label(c: &LabelConfig, region: &[u8]) {
    let enc = c.encode().expect("a config decoded from a label fits in one");
    assert_eq!(enc.len(), CONFIG_SIZE);
    assert_eq!(LabelConfig::decode(&enc).as_ref(), Ok(c));
    // The decoder ignores payload bytes past the vdev tree (and the hot
    // spares after it) and the padding;
    // when the declared payload length is the one re-encoding produces, the
    // payload must come back byte for byte.
    let payload_len = le_u32(&enc, 12) as usize;
    if le_u32(region, 12) as usize == payload_len {
        assert_eq!(&enc[..16 + payload_len], &region[..16 + payload_len], "label payload not canonical");
    }
    assert!(c.tree.leaves().iter().all(|l| l.kind.is_leaf()));
    let _ = c.tree.guid_sum();
    check_tree_bounds(&c.tree);
    assert!(c.spares.len() <= tarn_ondisk::label::MAX_SPARES, "{} hot spares", c.spares.len());
    assert!(c.spares.iter().all(|s| s.kind.is_leaf() && s.children.is_empty()), "a hot spare that is no leaf");
    assert!(c.logs.len() < c.tree.children.len().max(1), "every top-level vdev a log vdev");
    assert!(c.logs.iter().all(|id| (*id as usize) < c.tree.children.len()), "a log vdev that is not in the tree");
    assert!(c.logs.iter().all(|id| !c.tree.children[*id as usize].is_hole()), "a hole listed as a log vdev");
    assert!(!c.tree.children.last().is_some_and(|t| t.is_hole()), "a hole as the last top-level vdev");
    let mut stack: Vec<&VdevNode> = c.tree.children.iter().flat_map(|t| t.children.iter()).collect();
    while let Some(n) = stack.pop() {
        assert!(!n.is_hole(), "a hole below a top-level vdev");
        stack.extend(n.children.iter());
    }
    assert!(c.tree.children.iter().filter(|t| t.is_hole()).all(|t| t.children.is_empty() && t.guid == 0 && t.asize == 0), "a hole that is not empty");
}

/// The decoder's limits on the vdev tree hold: at most 4 levels below the
/// root, at most 256 children per node.
fn check_tree_bounds(root: &VdevNode) {
    let mut stack = vec![(root, 0usize)];
    while let Some((n, depth)) = stack.pop() {
        assert!(depth <= 4, "vdev tree deeper than 4 levels below the root");
        assert!(n.children.len() <= 256, "vdev node with {} children", n.children.len());
        stack.extend(n.children.iter().map(|c| (c, depth + 1)));
    }
}

/// A 512-byte uberblock holding `body` (version onwards) behind the magic,
/// sealed with a correct checksum.
pub(super) fn seal_uberblock(body: &[u8]) -> [u8; UB_SIZE] {
    let mut b = [0u8; UB_SIZE];
    put_u64(&mut b, 0, UB_MAGIC);
    let n = body.len().min(UB_BODY_MAX);
    b[8..8 + n].copy_from_slice(&body[..n]);
    reseal_uberblock(&mut b);
    b
}

fn reseal_uberblock(b: &mut [u8; UB_SIZE]) {
    let sum = blake3::hash(&b[..480]);
    b[480..].copy_from_slice(sum.as_bytes());
}

/// Uberblock decoder: the raw input (checksum path), then the input sealed.
pub fn uberblock(data: &[u8]) -> Outcome {
    let raw = Uberblock::decode(data).map(|ub| check_uberblock(&ub, &data[..UB_SIZE])).is_ok();
    let sealed_bytes = seal_uberblock(data);
    let sealed = Uberblock::decode(&sealed_bytes).map(|ub| check_uberblock(&ub, &sealed_bytes)).is_ok();
    Outcome::from_any(&[raw, sealed])
}

/// Re-encoding gives the same value, and the same bytes except reserved ones.
fn check_uberblock(ub: &Uberblock, raw: &[u8]) {
    let enc = ub.encode();
    assert_eq!(Uberblock::decode(&enc).as_ref(), Ok(ub));
    let mut expect = [0u8; UB_SIZE];
    expect.copy_from_slice(raw);
    for off in UB_BP_OFFSETS {
        clear_bp_reserved(&mut expect[off..off + BP_SIZE]);
    }
    expect[448..480].fill(0);
    reseal_uberblock(&mut expect);
    assert_eq!(enc, expect, "re-encoding changed more than the reserved bytes");
}

/// A 1 KiB object-set root holding `body` (type onwards) behind the magic.
pub(super) fn seal_objset(body: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; OBJSET_PHYS_SIZE];
    put_u64(&mut b, 0, OBJSET_MAGIC);
    let n = body.len().min(OBJSET_PHYS_SIZE - 8);
    b[8..8 + n].copy_from_slice(&body[..n]);
    b
}

/// Dnode and object-set root decoders.
pub fn dnode(data: &[u8]) -> Outcome {
    let dn = match Dnode::decode(data) {
        Ok(Some(d)) => {
            check_dnode(&d, data);
            true
        }
        Ok(None) => {
            assert_eq!(data[0], 0, "only a zero type byte is a free slot");
            true
        }
        Err(_) => false,
    };
    let os_raw = ObjsetPhys::decode(data).map(|os| check_objset(&os, data)).is_ok();
    let region = seal_objset(data);
    let os_sealed = ObjsetPhys::decode(&region).map(|os| check_objset(&os, &region)).is_ok();
    Outcome::from_any(&[dn, os_raw, os_sealed])
}

/// The dnode fits in the slots its header declares and re-encodes to the
/// same value and, but for the slot count and reserved bytes, the same bytes.
fn check_dnode(d: &Dnode, raw: &[u8]) {
    let declared = raw[4] as usize;
    let slots = d.slots();
    assert!(slots <= declared, "dnode needs {slots} slots, its header declares {declared}");
    let mut enc = vec![0u8; slots * SLOT_SIZE];
    d.encode(&mut enc);
    assert_eq!(Dnode::decode(&enc), Ok(Some(d.clone())));
    // The form the input was in is the form it is written in (a dnode the
    // short form can hold is never read from the long one: the encoder
    // would choose short), so the header and body compare byte for byte.
    let short = |flags: u8| flags & FLAG_SHORT != 0;
    let (header, same): (usize, &[std::ops::Range<usize>]) =
        if short(raw[3]) { (SHORT_HEADER, &[0..4, 5..20]) } else { (DNODE_HEADER, &[0..4, 5..11, 12..14, 16..48]) };
    if enc[3] != raw[3] {
        assert!(!short(raw[3]) && short(enc[3]), "a short dnode re-encoded long");
        return;
    }
    for r in same {
        assert_eq!(enc[r.clone()], raw[r.clone()], "dnode header bytes {r:?} changed");
    }
    let end = d.encoded_len();
    let mut expect = raw[header..end].to_vec();
    if d.blkptr.is_some() {
        clear_bp_reserved(&mut expect[..BP_SIZE]);
    }
    assert_eq!(&enc[header..end], &expect[..], "dnode body changed");
}

fn check_objset(os: &ObjsetPhys, raw: &[u8]) {
    let enc = os.encode();
    assert_eq!(ObjsetPhys::decode(&enc).as_ref(), Ok(os));
    assert_eq!(&enc[..9], &raw[..9]);
    assert_eq!(&enc[208..232], &raw[208..232]);
    check_dnode(&os.meta_dnode, &raw[16..208]);
}

/// Key/value map decoder, on the input and on the input behind the magic.
pub fn kv(data: &[u8]) -> Outcome {
    let raw = check_kv(data);
    let mut sealed = KV_MAGIC.to_vec();
    sealed.extend_from_slice(data);
    Outcome::from_any(&[raw, check_kv(&sealed)])
}

/// The map encoding is canonical: what decodes re-encodes to the same bytes.
fn check_kv(b: &[u8]) -> bool {
    match kv::decode(b) {
        Ok(m) => {
            assert_eq!(kv::encode(&m), b, "key/value map encoding not canonical");
            true
        }
        Err(_) => false,
    }
}

/// Header and bucket magics of the block reference table, private there.
const BRT_HEADER_MAGIC: &[u8; 8] = b"TARNBRT1";
const BRT_BUCKET_MAGIC: &[u8; 4] = b"TBRB";

/// A 4 KiB table block holding `prefix` then the input (cut or zero-padded).
fn brt_block(prefix: &[u8], data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; BRT_BLOCK_SIZE];
    b[..prefix.len()].copy_from_slice(prefix);
    let n = data.len().min(BRT_BLOCK_SIZE - prefix.len());
    b[prefix.len()..prefix.len() + n].copy_from_slice(&data[..n]);
    b
}

/// Block reference table decoders: the header and a bucket, each on the
/// input as a block and on the input behind its magic.
pub fn brt(data: &[u8]) -> Outcome {
    let raw = brt_block(&[], data);
    let header = [raw.clone(), brt_block(BRT_HEADER_MAGIC, data)].map(|b| BrtHeader::decode(&b).map(|h| check_brt_header(&h, &b)).is_ok());
    let bucket = [raw, brt_block(BRT_BUCKET_MAGIC, data)].map(|b| decode_bucket(&b).map(|es| check_brt_bucket(&es, &b)).is_ok());
    // The decoders insist on whole blocks.
    if data.len() != BRT_BLOCK_SIZE {
        assert!(BrtHeader::decode(data).is_err() && decode_bucket(data).is_err(), "a table block of {} bytes decoded", data.len());
    }
    Outcome::from_any(&[header[0], header[1], bucket[0], bucket[1]])
}

/// Canonical: a decoded header re-encodes to exactly its block.
fn check_brt_header(h: &BrtHeader, raw: &[u8]) {
    assert!(h.nbuckets.is_power_of_two() && h.saved_bytes >= h.used_bytes);
    assert_eq!(h.encode(), raw, "table header encoding not canonical");
}

/// Canonical, and the entries obey the table's rules.
fn check_brt_bucket(es: &[tarn_ondisk::brt::BrtEntry], raw: &[u8]) {
    assert!(es.len() <= BUCKET_ENTRIES_MAX);
    assert!(es.iter().all(|e| e.refcount >= 1 && e.asize > 0 && e.asize % 512 == 0));
    assert!(es.windows(2).all(|w| w[0].key < w[1].key));
    assert_eq!(encode_bucket(es), raw, "table bucket encoding not canonical");
}

/// One event of a pool's event ring (`EventRecord::decode`): canonical, and
/// within the format's bounds.
pub fn event(data: &[u8]) -> Outcome {
    match EventRecord::decode(data) {
        Ok(r) => {
            assert!(r.fields.len() <= FIELDS_MAX && !r.class.is_empty());
            assert_eq!(r.encode(), data, "event record encoding not canonical");
            Outcome::Accepted
        }
        Err(_) => Outcome::Rejected,
    }
}

/// Intent-log header, records and blocks (`tarn_ondisk::zil`): each as is,
/// and the input as a block's records behind a header with a correct
/// checksum (its first 2 bytes the record count), so the fuzzer reaches
/// the record decoders through `decode_block`.
pub fn zil(data: &[u8]) -> Outcome {
    use tarn_ondisk::zil::{decode_block, seal_block, BlockHeader, BlockRead, LogPtr, Record, ZilHeader, BLOCK_HEADER, LOG_BLOCK_MAX};
    let mut accepted = Vec::new();
    if let Ok(h) = ZilHeader::decode(data) {
        assert_eq!(h.encode(), data, "log header encoding not canonical");
        accepted.push(true);
    }
    if let Ok((r, n)) = Record::decode(data) {
        assert!(n <= data.len());
        assert_eq!(r.encoded_len(), n);
        let mut w = tarn_ondisk::codec::Writer::new();
        r.encode(&mut w);
        assert_eq!(w.into_vec(), &data[..n], "log record encoding not canonical");
        accepted.push(true);
    }
    let ptr = LogPtr { vdev: 0, size: LOG_BLOCK_MAX, offset: 0, asize: LOG_BLOCK_MAX as u64, seq: 7 };
    let as_is = decode_block(data, 1, 2, &ptr);
    assert!(!matches!(as_is, Ok(BlockRead::Valid(..))) || data.len() >= BLOCK_HEADER);
    if data.len() >= 2 && data.len() - 2 <= LOG_BLOCK_MAX as usize - BLOCK_HEADER {
        let n = u16::from_le_bytes([data[0], data[1]]) as u32;
        let next = LogPtr { seq: 8, offset: 1 << 20, ..ptr };
        let h = BlockHeader { guid: 1, dataset: 2, seq: 7, used: 0, nrecords: n, next };
        let sealed = seal_block(&h, n, &data[2..], LOG_BLOCK_MAX as usize);
        if let Ok(BlockRead::Valid(got, recs)) = decode_block(&sealed, 1, 2, &ptr) {
            assert_eq!((got.next, got.nrecords as usize), (next, recs.len()));
            let again = tarn_ondisk::zil::encode_block(&got, &recs, LOG_BLOCK_MAX as usize);
            assert_eq!(again, sealed, "log block encoding not canonical");
            accepted.push(true);
        }
    }
    Outcome::from_any(&accepted)
}

