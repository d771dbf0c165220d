//! Reading and writing the labels and uberblock rings of one device.
//!
//! See `tarn_ondisk::label` for the layout. Reading never fails as a whole: a
//! damaged label is reported and skipped, and the caller decides from what
//! survived. Writing the config goes in two phases (labels 0 and 2, flush,
//! then 1 and 3) so a crash in the middle leaves a complete pair.

use std::io;

use tarn_ondisk::label::{self, LabelConfig, CONFIG_SIZE, LABEL_COUNT};
use tarn_ondisk::uberblock::{Uberblock, UB_SIZE};

use crate::sys::buf::AlignedBuf;
use crate::sys::device::BlockDevice;

/// What one device's labels say.
#[derive(Debug, Default)]
pub struct DeviceLabels {
    /// The valid config with the highest config txg, if any.
    pub config: Option<LabelConfig>,
    /// Labels (0..4) whose config did not verify, with the reason.
    pub bad: Vec<(usize, String)>,
    /// Every uberblock that verified, from all rings (duplicates included).
    pub uberblocks: Vec<Uberblock>,
}

pub fn read_labels(dev: &dyn BlockDevice) -> DeviceLabels {
    let mut out = DeviceLabels::default();
    let size = dev.size_bytes();
    if size < label::MIN_DEVICE_BYTES {
        out.bad.push((0, format!("device of {} bytes is too small to hold a tarn pool", size)));
        return out;
    }
    for i in 0..LABEL_COUNT {
        let mut buf = AlignedBuf::zeroed(label::LABEL_SIZE as usize);
        if let Err(e) = dev.read_at(&mut buf, label::label_offset(i, size)) {
            out.bad.push((i, format!("read failed: {}", e)));
            continue;
        }
        match LabelConfig::decode(&buf[..CONFIG_SIZE]) {
            Ok(c) => {
                if out.config.as_ref().is_none_or(|o| c.config_txg > o.config_txg) {
                    read_ring(&buf, c.tree_ashift(), &mut out.uberblocks);
                    out.config = Some(c);
                } else {
                    read_ring(&buf, c.tree_ashift(), &mut out.uberblocks);
                }
            }
            Err(e) => {
                out.bad.push((i, e.to_string()));
                // The ring may still be intact even if the config is not.
                read_ring(&buf, 12, &mut out.uberblocks);
            }
        }
    }
    out
}

fn read_ring(label_buf: &[u8], ashift: u8, out: &mut Vec<Uberblock>) {
    let slot = label::ub_slot_size(ashift) as usize;
    let ring = &label_buf[label::UB_RING_OFFSET as usize..(label::UB_RING_OFFSET + label::UB_RING_SIZE) as usize];
    for s in ring.chunks_exact(slot) {
        if let Ok(ub) = Uberblock::decode(&s[..UB_SIZE]) {
            out.push(ub);
        }
    }
}

trait TreeAshift {
    fn tree_ashift(&self) -> u8;
}

impl TreeAshift for LabelConfig {
    /// The ashift of the device carrying this label.
    fn tree_ashift(&self) -> u8 {
        self.tree.leaves().iter().find(|l| l.guid == self.device_guid).map_or(12, |l| l.ashift)
    }
}

/// Writes `cfg` into the config region of the given labels, then flushes.
pub fn write_config(dev: &dyn BlockDevice, cfg: &LabelConfig, labels: &[usize]) -> io::Result<()> {
    let bytes = cfg.encode().map_err(io::Error::other)?;
    let buf = AlignedBuf::from_slice(&bytes);
    let size = dev.size_bytes();
    for &i in labels {
        dev.write_at(&buf, label::label_offset(i, size))?;
    }
    dev.flush()
}

/// Writes the config in two phases: labels 0 and 2, then 1 and 3.
pub fn write_config_all(dev: &dyn BlockDevice, cfg: &LabelConfig) -> io::Result<()> {
    write_config(dev, cfg, &[0, 2])?;
    write_config(dev, cfg, &[1, 3])
}

/// Zeroes whole labels (used when a pool is created on a reused device, so
/// no stale uberblock of an older pool can be picked up).
pub fn clear_labels(dev: &dyn BlockDevice) -> io::Result<()> {
    let buf = AlignedBuf::zeroed(label::LABEL_SIZE as usize);
    let size = dev.size_bytes();
    for i in 0..LABEL_COUNT {
        dev.write_at(&buf, label::label_offset(i, size))?;
    }
    dev.flush()
}

/// The buffer of one uberblock ring slot.
pub fn uberblock_slot(ub: &Uberblock, ashift: u8) -> AlignedBuf {
    let mut buf = AlignedBuf::zeroed(label::ub_slot_size(ashift) as usize);
    buf[..UB_SIZE].copy_from_slice(&ub.encode());
    buf
}
