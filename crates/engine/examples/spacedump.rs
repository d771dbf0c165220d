//! Debug aid: prints the uberblocks of a pool device and the space log /
//! checkpoint chain of the newest one, without opening the pool.
use std::sync::Arc;
use tarn_engine::pool::label::read_labels;
use tarn_engine::sys::{BlockDevice, FileDevice};
use tarn_ondisk::bp::{BlockPtr, BP_SIZE};

fn read_raw(dev: &Arc<dyn BlockDevice>, bp: &BlockPtr) -> Vec<u8> {
    let d = bp.dva[0];
    let mut buf = tarn_engine::sys::AlignedBuf::zeroed(d.asize as usize);
    dev.read_at(&mut buf, d.offset).unwrap();
    buf[..bp.psize as usize].to_vec()
}

fn main() {
    let path = std::env::args().nth(1).expect("device path");
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open_read_only(&path).unwrap());
    let l = read_labels(dev.as_ref());
    let mut txgs: Vec<u64> = l.uberblocks.iter().map(|u| u.txg).collect();
    txgs.sort();
    txgs.dedup();
    println!("uberblock txgs: {:?}", txgs);
    let want: u64 = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(*txgs.last().unwrap());
    let ub = l.uberblocks.iter().find(|u| u.txg == want).unwrap();
    println!("ub {} cp_txg {} log {:?}", ub.txg, ub.space_cp_txg, ub.space_log.dva[0]);
    let mut at = ub.space_log;
    while !at.is_hole() {
        let data = read_raw(&dev, &at);
        let prev = BlockPtr::decode(&data[..BP_SIZE]).unwrap();
        let recs = tarn_engine::pool::alloc::spacelog::decode_records(&data[BP_SIZE..]).unwrap();
        let a: u64 = recs.allocs.iter().map(|e| e.len).sum();
        let f: u64 = recs.frees.iter().map(|e| e.len).sum();
        println!("log txg {} birth {} allocs {} ({} bytes) frees {} ({} bytes) first alloc {:?}", recs.txg, at.birth, recs.allocs.len(), a, recs.frees.len(), f, recs.allocs.first());
        at = prev;
    }
}
