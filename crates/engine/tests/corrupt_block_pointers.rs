//! Block pointers that decode (their fields are in range) but point somewhere
//! impossible must make reads fail as corrupt, never panic.

use std::sync::Arc;

use tarn_engine::io::IoClass;
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::{CreateOptions, ErrorKind, Pool};
use tarn_ondisk::bp::{BlockPtr, ChecksumType, Dva, ObjectType};

fn pool() -> Pool {
    let dev = Arc::new(FaultDevice::new(128 << 20, 1).with_name("mem0"));
    let devs = vec![("mem0".to_string(), dev as Arc<dyn BlockDevice>)];
    Pool::create_on("tank", devs, vec![], &CreateOptions::default()).expect("create pool")
}

/// A 4 KiB uncompressed block at `offset` on vdev 0.
fn bp_at(offset: u64) -> BlockPtr {
    let mut bp = BlockPtr::hole(4096, ObjectType::PlainData, 0);
    bp.psize = 4096;
    bp.checksum = ChecksumType::Fletcher4;
    bp.birth = 1;
    bp.fill = 1;
    bp.dva[0] = Dva { vdev: 0, asize: 4096, offset };
    assert!(bp.validate().is_ok());
    assert_eq!(BlockPtr::decode(&bp.to_bytes()), Ok(bp));
    bp
}

/// Regression: `PoolCore::read_copy` checked `dva.offset + len > dev_size`
/// with a plain addition, so a pointer whose offset is near `u64::MAX`
/// (one corrupt DVA) overflowed: a panic with overflow checks, and without
/// them a wrapped sum that passed the check and sent the read past the device.
#[test]
fn dva_offset_near_u64_max_is_corrupt_not_overflow() {
    let pool = pool();
    for offset in [u64::MAX, u64::MAX - 4095, u64::MAX - (1 << 20)] {
        let err = pool
            .core()
            .read_block(&bp_at(offset), IoClass::SyncRead, &|| "crafted block".into())
            .expect_err("a block past the device's end cannot be read");
        assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
    }
}

/// A pointer just past the end of the device is refused the same way.
#[test]
fn dva_past_device_end_is_corrupt() {
    let pool = pool();
    let end = pool.core().vdevs.get(0).expect("a top-level vdev").dev_size;
    let err = pool
        .core()
        .read_block(&bp_at(end - 2048), IoClass::SyncRead, &|| "crafted block".into())
        .expect_err("a block past the device's end cannot be read");
    assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
}
