//! Recognising what a device already holds, before tarn writes over it.
//!
//! `pool create` and `pool add` overwrite a device's first and last
//! 512 KiB at once (labels, a cache header), so a file system, a swap area,
//! a partition table or another pool's label on it must be found first and
//! named ("/dev/loop3 contains an ext4 file system"); `-f` then says the
//! operator means it. OpenZFS's zpool asks libblkid; tarn reads the few
//! places where the common formats keep a magic number itself — a small
//! prober with no dependency, whose table is below.
//!
//! The prober is pure: [`identify`] looks at two byte windows, the device's
//! first [`HEAD_BYTES`] and the [`TAIL_BYTES`] that end at its size rounded
//! down to 256 KiB (where ZFS and tarn keep their back labels). Reading them
//! is [`probe_device`]'s job; the fuzz target and the unit tests drive
//! `identify` directly, so they test exactly the code that runs on devices.
//! Every access goes through [`bytes_at`], which answers `None` past the end
//! of a short window: a device smaller than a format's superblock offset
//! simply does not hold that format.
//!
//! | format | where (head unless said) | what |
//! |---|---|---|
//! | tarn label | 0, 256 KiB; tail 0, 256 KiB | `TARNLBL1` |
//! | tarn cache header | 0 | `TARNL2C1` |
//! | ZFS label | uberblock rings at 128–256 KiB of labels 0–3 | `0x00bab10c`, either byte order, every 1 KiB |
//! | LUKS | 0 | `LUKS\xba\xbe` |
//! | xfs | 0 | `XFSB`, block size a power of two 512–64 KiB |
//! | squashfs | 0 | `hsqs` |
//! | ext2/3/4 | 1024 + 56 | `0xef53`, sane block size and counts; features tell the kind |
//! | f2fs | 1024 | `0xf2f52010` |
//! | btrfs | 64 KiB + 64 | `_BHRfS_M` |
//! | iso9660 | 32 KiB + 1 | `CD001` |
//! | Linux RAID 1.1/1.2 | 0, 4 KiB | `0xa92b4efc`, major version 1 |
//! | LVM2 | sectors 0–3 | `LABELONE` … `LVM2 001` |
//! | swap | page size − 10 (4, 8, 16, 64 KiB pages) | `SWAPSPACE2`, `SWAP-SPACE` |
//! | exfat, ntfs | 3 | `EXFAT   `, `NTFS    ` |
//! | vfat | 54 or 82, with `0x55aa` at 510 | `FAT12`, `FAT16`, `FAT32` |
//! | GPT | 512, 4096 | `EFI PART` (or a protective MBR entry) |
//! | MBR | 446–511 | `0x55aa`, four sane entries, at least one in use |
//!
//! The checks run in that order and the first match is reported: boot
//! sectors carry `0x55aa` too, so the file systems that have one are tried
//! before the bare partition table. A match needs the magic and, where the
//! format has them, fields that make a chance match in random data unlikely
//! (ext's 2-byte magic comes with three sanity checks). What the prober
//! misses is what libblkid finds beyond this table (bcache, reiserfs, md
//! 0.90/1.0 superblocks at the end, …): `-f`-free acceptance of such a
//! device is the residual risk, as it is for zpool with an older libblkid.

use std::io;

use super::buf::AlignedBuf;
use super::device::BlockDevice;

/// Bytes read from the front of a device: both front labels of ZFS and tarn.
pub const HEAD_BYTES: usize = 512 << 10;
/// Bytes read before the (256 KiB-aligned) end: both back labels.
pub const TAIL_BYTES: usize = 512 << 10;
/// ZFS and tarn place their back labels relative to the size rounded down to this.
const LABEL_ALIGN: u64 = 256 << 10;

/// What was found on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signature {
    TarnLabel,
    TarnCache,
    Zfs,
    Luks,
    Xfs,
    Squashfs,
    Ext2,
    Ext3,
    Ext4,
    F2fs,
    Btrfs,
    Iso9660,
    LinuxRaid,
    Lvm2,
    Swap,
    Exfat,
    Ntfs,
    Vfat,
    Gpt,
    Mbr,
}

impl Signature {
    /// What the device holds, as the object of "contains …".
    pub fn describe(self) -> &'static str {
        match self {
            Signature::TarnLabel => "a tarn pool label",
            Signature::TarnCache => "a tarn cache device header",
            Signature::Zfs => "a ZFS pool label",
            Signature::Luks => "a LUKS encrypted volume",
            Signature::Xfs => "an xfs file system",
            Signature::Squashfs => "a squashfs file system",
            Signature::Ext2 => "an ext2 file system",
            Signature::Ext3 => "an ext3 file system",
            Signature::Ext4 => "an ext4 file system",
            Signature::F2fs => "an f2fs file system",
            Signature::Btrfs => "a btrfs file system",
            Signature::Iso9660 => "an iso9660 file system",
            Signature::LinuxRaid => "a Linux RAID (md) member",
            Signature::Lvm2 => "an LVM2 physical volume",
            Signature::Swap => "swap space",
            Signature::Exfat => "an exfat file system",
            Signature::Ntfs => "an ntfs file system",
            Signature::Vfat => "a vfat file system",
            Signature::Gpt => "a GPT partition table",
            Signature::Mbr => "an MBR partition table",
        }
    }
}

/// Which window a match lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    Head,
    Tail,
}

/// A signature and where its magic number lies: `len` bytes at `offset` of
/// `window`. Zeroing those bytes makes that match go away (the fuzz target
/// checks this, so a report always points at its real cause).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub signature: Signature,
    pub window: Window,
    pub offset: usize,
    pub len: usize,
}

/// `len` bytes at `offset` of `b`, if the window holds them.
pub fn bytes_at(b: &[u8], offset: usize, len: usize) -> Option<&[u8]> {
    b.get(offset..offset.checked_add(len)?)
}

fn le16(b: &[u8], o: usize) -> Option<u16> {
    bytes_at(b, o, 2).map(|s| u16::from_le_bytes([s[0], s[1]]))
}

fn le32(b: &[u8], o: usize) -> Option<u32> {
    bytes_at(b, o, 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn be32(b: &[u8], o: usize) -> Option<u32> {
    bytes_at(b, o, 4).map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn is(b: &[u8], o: usize, magic: &[u8]) -> bool {
    bytes_at(b, o, magic.len()) == Some(magic)
}

fn head(signature: Signature, offset: usize, len: usize) -> Found {
    Found { signature, window: Window::Head, offset, len }
}

/// One family of formats: looks at the head and tail windows.
type Check = fn(&[u8], &[u8]) -> Option<Found>;

/// The first signature found in the head or tail window (see the table in
/// the module docs for the order).
pub fn identify(head_bytes: &[u8], tail_bytes: &[u8]) -> Option<Found> {
    let checks: [Check; 8] = [tarn, zfs, at_zero, ext, at_superblock_offsets, raid_or_lvm, swap, boot_sector];
    checks.iter().find_map(|c| c(head_bytes, tail_bytes))
}

const TARN_LABEL_MAGIC: &[u8] = b"TARNLBL1";
const TARN_CACHE_MAGIC: &[u8] = b"TARNL2C1";

fn tarn(h: &[u8], t: &[u8]) -> Option<Found> {
    if is(h, 0, TARN_CACHE_MAGIC) {
        return Some(head(Signature::TarnCache, 0, 8));
    }
    let at = [(Window::Head, h, 0), (Window::Head, h, 256 << 10), (Window::Tail, t, 0), (Window::Tail, t, 256 << 10)];
    at.iter().find(|(_, b, o)| is(b, *o, TARN_LABEL_MAGIC)).map(|&(window, _, offset)| Found { signature: Signature::TarnLabel, window, offset, len: 8 })
}

/// ZFS's uberblock magic, as a little- and a big-endian u64.
const ZFS_UB_LE: [u8; 8] = 0x00ba_b10c_u64.to_le_bytes();
const ZFS_UB_BE: [u8; 8] = 0x00ba_b10c_u64.to_be_bytes();

/// Looks for an uberblock in the rings (128–256 KiB) of the two labels of
/// each window; slots are at least 1 KiB.
fn zfs(h: &[u8], t: &[u8]) -> Option<Found> {
    for (window, b) in [(Window::Head, h), (Window::Tail, t)] {
        for label in [0usize, 256 << 10] {
            for slot in (128usize << 10..256 << 10).step_by(1024) {
                let o = label + slot;
                if is(b, o, &ZFS_UB_LE) || is(b, o, &ZFS_UB_BE) {
                    return Some(Found { signature: Signature::Zfs, window, offset: o, len: 8 });
                }
            }
        }
    }
    None
}

/// Formats with their magic at byte 0.
fn at_zero(h: &[u8], _: &[u8]) -> Option<Found> {
    if is(h, 0, b"LUKS\xba\xbe") {
        return Some(head(Signature::Luks, 0, 6));
    }
    if is(h, 0, b"XFSB") && be32(h, 4).is_some_and(|bs| bs.is_power_of_two() && (512..=65536).contains(&bs)) {
        return Some(head(Signature::Xfs, 0, 4));
    }
    if is(h, 0, b"hsqs") {
        return Some(head(Signature::Squashfs, 0, 4));
    }
    None
}

const EXT_SB: usize = 1024;
const EXT_MAGIC: u16 = 0xef53;
const EXT_COMPAT_HAS_JOURNAL: u32 = 0x4;
/// Incompatible features ext3 also has (filetype, recover, meta_bg); any
/// other makes it ext4.
const EXT3_INCOMPAT: u32 = 0x2 | 0x4 | 0x10;
/// Read-only-compatible features ext3 also has (sparse_super, large_file,
/// btree_dir); any other makes it ext4.
const EXT3_RO_COMPAT: u32 = 0x1 | 0x2 | 0x4;

fn ext(h: &[u8], _: &[u8]) -> Option<Found> {
    let magic_at = EXT_SB + 56;
    if le16(h, magic_at)? != EXT_MAGIC {
        return None;
    }
    // A chance 0xef53 in other data rarely comes with these.
    let inodes = le32(h, EXT_SB)?;
    let log_block_size = le32(h, EXT_SB + 24)?;
    let blocks_per_group = le32(h, EXT_SB + 32)?;
    if inodes == 0 || blocks_per_group == 0 || log_block_size > 6 {
        return None;
    }
    let compat = le32(h, EXT_SB + 92)?;
    let incompat = le32(h, EXT_SB + 96)?;
    let ro_compat = le32(h, EXT_SB + 100)?;
    let signature = if incompat & !EXT3_INCOMPAT != 0 || ro_compat & !EXT3_RO_COMPAT != 0 {
        Signature::Ext4
    } else if compat & EXT_COMPAT_HAS_JOURNAL != 0 {
        Signature::Ext3
    } else {
        Signature::Ext2
    };
    Some(head(signature, magic_at, 2))
}

/// Formats with a superblock at a fixed offset past the start.
fn at_superblock_offsets(h: &[u8], _: &[u8]) -> Option<Found> {
    if le32(h, 1024) == Some(0xf2f5_2010) {
        return Some(head(Signature::F2fs, 1024, 4));
    }
    let btrfs = (64 << 10) + 64;
    if is(h, btrfs, b"_BHRfS_M") {
        return Some(head(Signature::Btrfs, btrfs, 8));
    }
    let iso = (32 << 10) + 1;
    if is(h, iso, b"CD001") {
        return Some(head(Signature::Iso9660, iso, 5));
    }
    None
}

const MD_MAGIC: u32 = 0xa92b_4efc;

fn raid_or_lvm(h: &[u8], _: &[u8]) -> Option<Found> {
    for o in [0usize, 4096] {
        if le32(h, o) == Some(MD_MAGIC) && le32(h, o + 4) == Some(1) {
            return Some(head(Signature::LinuxRaid, o, 4));
        }
    }
    (0..4).map(|s| s * 512).find(|&o| is(h, o, b"LABELONE") && is(h, o + 24, b"LVM2 001")).map(|o| head(Signature::Lvm2, o, 8))
}

fn swap(h: &[u8], _: &[u8]) -> Option<Found> {
    for page in [4usize << 10, 8 << 10, 16 << 10, 64 << 10] {
        let o = page - 10;
        if is(h, o, b"SWAPSPACE2") || is(h, o, b"SWAP-SPACE") {
            return Some(head(Signature::Swap, o, 10));
        }
    }
    None
}

/// Sector 0 as a boot sector: DOS file systems, then partition tables.
fn boot_sector(h: &[u8], _: &[u8]) -> Option<Found> {
    if is(h, 3, b"EXFAT   ") {
        return Some(head(Signature::Exfat, 3, 8));
    }
    if is(h, 3, b"NTFS    ") {
        return Some(head(Signature::Ntfs, 3, 8));
    }
    let boot_magic = is(h, 510, &[0x55, 0xaa]);
    if boot_magic {
        for (o, name) in [(54usize, &b"FAT12"[..]), (54, b"FAT16"), (82, b"FAT32")] {
            if is(h, o, name) {
                return Some(head(Signature::Vfat, o, name.len()));
            }
        }
    }
    for o in [512usize, 4096] {
        if is(h, o, b"EFI PART") {
            return Some(head(Signature::Gpt, o, 8));
        }
    }
    if boot_magic {
        return mbr(h);
    }
    None
}

/// The four MBR entries at 446: each boot flag 0 or 0x80; at least one
/// entry with a type and a length. A protective entry (0xee) is GPT's.
fn mbr(h: &[u8]) -> Option<Found> {
    let mut used = None;
    for i in 0..4 {
        let e = bytes_at(h, 446 + i * 16, 16)?;
        if e[0] != 0 && e[0] != 0x80 {
            return None;
        }
        let kind = e[4];
        let sectors = u32::from_le_bytes([e[12], e[13], e[14], e[15]]);
        if kind != 0 && sectors != 0 && used.is_none() {
            used = Some((446 + i * 16 + 4, kind));
        }
    }
    let (type_at, kind) = used?;
    // The entry's type byte is the reported magic: zeroing it unclaims it.
    let signature = if kind == 0xee { Signature::Gpt } else { Signature::Mbr };
    Some(head(signature, type_at, 1))
}

/// Where the tail window starts on a device of `size` bytes, and its length.
pub fn tail_window(size: u64) -> (u64, usize) {
    let end = size / LABEL_ALIGN * LABEL_ALIGN;
    let len = end.min(TAIL_BYTES as u64);
    // The tail never overlaps the head: a device of at most HEAD + TAIL bytes
    // has its back labels (if any) inside what the head already covers.
    if end < (HEAD_BYTES + TAIL_BYTES) as u64 {
        return (end, 0);
    }
    (end - len, len as usize)
}

/// Reads the two windows of `dev` and identifies what it holds.
pub fn probe_device(dev: &dyn BlockDevice) -> io::Result<Option<Found>> {
    let size = dev.size_bytes();
    let head_len = (size.min(HEAD_BYTES as u64) / 512 * 512) as usize;
    let mut h = AlignedBuf::zeroed(head_len);
    dev.read_at(&mut h, 0)?;
    let (tail_at, tail_len) = tail_window(size);
    let mut t = AlignedBuf::zeroed(tail_len);
    dev.read_at(&mut t, tail_at)?;
    Ok(identify(&h, &t))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A head window with `magic` written at `offset` (zeros elsewhere).
    fn with(len: usize, parts: &[(usize, &[u8])]) -> Vec<u8> {
        let mut b = vec![0u8; len];
        for (o, m) in parts {
            b[*o..*o + m.len()].copy_from_slice(m);
        }
        b
    }

    fn ext_sb(incompat: u32, ro_compat: u32, compat: u32) -> Vec<u8> {
        let mut b = vec![0u8; 2048];
        b[1024..1028].copy_from_slice(&100u32.to_le_bytes());
        b[1024 + 24..1024 + 28].copy_from_slice(&2u32.to_le_bytes());
        b[1024 + 32..1024 + 36].copy_from_slice(&32768u32.to_le_bytes());
        b[1024 + 56..1024 + 58].copy_from_slice(&EXT_MAGIC.to_le_bytes());
        b[1024 + 92..1024 + 96].copy_from_slice(&compat.to_le_bytes());
        b[1024 + 96..1024 + 100].copy_from_slice(&incompat.to_le_bytes());
        b[1024 + 100..1024 + 104].copy_from_slice(&ro_compat.to_le_bytes());
        b
    }

    fn sig(h: &[u8], t: &[u8]) -> Option<Signature> {
        identify(h, t).map(|f| f.signature)
    }

    #[test]
    fn every_format_of_the_table_is_found() {
        let xfs = with(512, &[(0, b"XFSB"), (4, &4096u32.to_be_bytes())]);
        let cases: Vec<(Vec<u8>, Signature)> = vec![
            (with(16, &[(0, b"TARNLBL1")]), Signature::TarnLabel),
            (with(300 << 10, &[(256 << 10, b"TARNLBL1")]), Signature::TarnLabel),
            (with(16, &[(0, b"TARNL2C1")]), Signature::TarnCache),
            (with(200 << 10, &[(130 << 10, &ZFS_UB_LE)]), Signature::Zfs),
            (with(512 << 10, &[(511 << 10, &ZFS_UB_BE)]), Signature::Zfs),
            (with(16, &[(0, b"LUKS\xba\xbe")]), Signature::Luks),
            (xfs, Signature::Xfs),
            (with(16, &[(0, b"hsqs")]), Signature::Squashfs),
            (ext_sb(0x2 | 0x40, 0, 0x4), Signature::Ext4),
            (ext_sb(0x2, 0x400, 0x4), Signature::Ext4),
            (ext_sb(0x2, 0x1, 0x4), Signature::Ext3),
            (ext_sb(0x2, 0x1, 0), Signature::Ext2),
            (with(2048, &[(1024, &0xf2f5_2010u32.to_le_bytes())]), Signature::F2fs),
            (with(70 << 10, &[((64 << 10) + 64, b"_BHRfS_M")]), Signature::Btrfs),
            (with(40 << 10, &[((32 << 10) + 1, b"CD001")]), Signature::Iso9660),
            (with(8192, &[(4096, &MD_MAGIC.to_le_bytes()), (4100, &1u32.to_le_bytes())]), Signature::LinuxRaid),
            (with(2048, &[(512, b"LABELONE"), (536, b"LVM2 001")]), Signature::Lvm2),
            (with(4096, &[(4086, b"SWAPSPACE2")]), Signature::Swap),
            (with(65536, &[(65526, b"SWAP-SPACE")]), Signature::Swap),
            (with(512, &[(3, b"EXFAT   ")]), Signature::Exfat),
            (with(512, &[(3, b"NTFS    ")]), Signature::Ntfs),
            (with(512, &[(82, b"FAT32   "), (510, &[0x55, 0xaa])]), Signature::Vfat),
            (with(512, &[(54, b"FAT16   "), (510, &[0x55, 0xaa])]), Signature::Vfat),
            (with(1024, &[(512, b"EFI PART")]), Signature::Gpt),
            (with(512, &[(446 + 4, &[0xee]), (446 + 12, &[1, 0, 0, 0]), (510, &[0x55, 0xaa])]), Signature::Gpt),
            (with(512, &[(446, &[0x80]), (446 + 4, &[0x83]), (446 + 12, &[0, 8, 0, 0]), (510, &[0x55, 0xaa])]), Signature::Mbr),
        ];
        for (i, (h, want)) in cases.iter().enumerate() {
            let found = identify(h, &[]).unwrap_or_else(|| panic!("case {i}: {want:?} not found"));
            assert_eq!(found.signature, *want, "case {i}");
            // The reported magic is the cause: zeroing it unclaims the match.
            let mut z = h.clone();
            z[found.offset..found.offset + found.len].fill(0);
            assert_ne!(identify(&z, &[]), Some(found), "case {i}");
        }
    }

    #[test]
    fn back_labels_are_found_in_the_tail() {
        let t = with(TAIL_BYTES, &[(256 << 10, b"TARNLBL1")]);
        let f = identify(&[], &t).expect("tarn label 3");
        assert_eq!((f.signature, f.window, f.offset), (Signature::TarnLabel, Window::Tail, 256 << 10));
        let t = with(TAIL_BYTES, &[((256 << 10) + (200 << 10), &ZFS_UB_LE)]);
        assert_eq!(sig(&[], &t), Some(Signature::Zfs));
    }

    #[test]
    fn near_misses_are_not_matches() {
        // Zeros, random-looking filler, and magics without their checks.
        assert_eq!(sig(&vec![0u8; HEAD_BYTES], &vec![0u8; TAIL_BYTES]), None);
        let filler: Vec<u8> = (0..HEAD_BYTES as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        assert_eq!(sig(&filler, &[]), None);
        let mut ext = ext_sb(0x40, 0, 0);
        ext[1024..1028].fill(0); // no inodes
        assert_eq!(sig(&ext, &[]), None);
        let mut ext = ext_sb(0x40, 0, 0);
        ext[1024 + 24] = 9; // 512 KiB blocks
        assert_eq!(sig(&ext, &[]), None);
        assert_eq!(sig(&with(512, &[(0, b"XFSB"), (4, &1000u32.to_be_bytes())]), &[]), None);
        // 0x55aa alone, or with a bad boot flag, is not a partition table.
        assert_eq!(sig(&with(512, &[(510, &[0x55, 0xaa])]), &[]), None);
        assert_eq!(sig(&with(512, &[(446, &[0x12]), (446 + 4, &[0x83]), (446 + 12, &[1]), (510, &[0x55, 0xaa])]), &[]), None);
        // md with another major version, LVM label without its type.
        assert_eq!(sig(&with(8, &[(0, &MD_MAGIC.to_le_bytes())]), &[]), None);
        assert_eq!(sig(&with(1024, &[(0, b"LABELONE")]), &[]), None);
    }

    #[test]
    fn short_windows_never_panic() {
        let full = ext_sb(0x40, 0, 0);
        for n in 0..full.len() {
            let _ = identify(&full[..n], &full[..n]);
        }
        assert_eq!(sig(&full[..1024 + 58], &[]), None, "ext needs its feature words");
    }

    #[test]
    fn the_tail_window_ends_on_a_label_boundary() {
        assert_eq!(tail_window(0), (0, 0));
        assert_eq!(tail_window((1 << 20) - 1), (768 << 10, 0), "a tail would overlap the head");
        assert_eq!(tail_window(1 << 20), (512 << 10, TAIL_BYTES));
        assert_eq!(tail_window((1 << 20) + 1), (512 << 10, TAIL_BYTES));
        let size = (100u64 << 20) + 12345;
        let (at, len) = tail_window(size);
        assert_eq!((at + len as u64) % LABEL_ALIGN, 0);
        assert_eq!(at + len as u64, 100 << 20);
        assert_eq!(len, TAIL_BYTES);
    }
}
