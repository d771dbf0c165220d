//! The oracle: the state a pool must hold as of a txg, derived from the
//! workload logs, and the checks that an imported pool holds exactly that.

use std::collections::{BTreeMap, BTreeSet};

use tarn_engine::{ErrorKind, Pool};

use super::workload::{apply, clone_source, put_bytes, Logged, Op};
use crate::common::first_difference;

/// Object id → content, for every object that exists.
pub type Model = BTreeMap<u64, Vec<u8>>;

/// The state as of txg `t`: for each object, every logged operation with
/// txg <= t, in its thread's order. Each object belongs to one thread, so its
/// thread's order is its order; a thread's txgs never decrease, so the
/// operations of txg <= t are a prefix of its log.
pub fn model_at(logs: &[Vec<Logged>], t: u64) -> Model {
    model_from(&Model::new(), logs, t)
}

/// `model_at` on top of `base`: the state a recovered pool started from.
pub fn model_from(base: &Model, logs: &[Vec<Logged>], t: u64) -> Model {
    let mut objs: BTreeMap<u64, Option<Vec<u8>>> = base.iter().map(|(&id, c)| (id, Some(c.clone()))).collect();
    for log in logs {
        assert!(log.windows(2).all(|w| w[0].txg <= w[1].txg), "a thread's txgs went backwards: {:?}", log);
        for e in log.iter().take_while(|e| e.txg <= t).filter(|e| !matches!(e.op, Op::Ds(_))) {
            if let Op::Clone { src, src_off, off, len } = e.op {
                // The source belongs to the same thread: its content here is
                // what the clone read.
                let from = objs.get(&src).and_then(|c| c.as_ref()).expect("a clone from a live object");
                let bytes = clone_source(from, src_off, len);
                put_bytes(objs.get_mut(&e.obj).and_then(|c| c.as_mut()).expect("a clone into a live object"), off, &bytes);
                continue;
            }
            apply(objs.entry(e.obj).or_insert(None), &e.op);
        }
    }
    objs.into_iter().filter_map(|(id, c)| c.map(|c| (id, c))).collect()
}

/// Every object any thread created (committed or not).
pub fn created(logs: &[Vec<Logged>]) -> BTreeSet<u64> {
    logs.iter().flatten().filter(|e| e.op == Op::Create).map(|e| e.obj).collect()
}

/// The pool's root dataset holds exactly `model`, and none of `gone` exists.
pub fn check_contents(pool: &Pool, model: &Model, gone: &BTreeSet<u64>, ctx: &str) {
    let os = pool.root();
    for (&id, want) in model {
        let info = os.info(id).unwrap_or_else(|e| panic!("{ctx}: object {id} should exist: {e}"));
        assert_eq!(info.size, want.len() as u64, "{ctx}: size of object {id}");
        let got = os.read(id, 0, want.len() + 1).unwrap_or_else(|e| panic!("{ctx}: reading object {id}: {e}"));
        assert!(got == *want, "{ctx}: object {id} differs from the model: {}", first_difference(&got, want));
    }
    for &id in gone.iter().filter(|id| !model.contains_key(id)) {
        match os.read(id, 0, 1) {
            Err(e) => assert_eq!(e.kind, ErrorKind::NotFound, "{ctx}: object {id} should not exist: {e}"),
            Ok(d) => panic!("{ctx}: object {id} should not exist but reads {} bytes", d.len()),
        }
    }
}

/// Every block verifies, the allocator agrees with the block tree, and the
/// engine's own invariants hold.
pub fn check_verified(pool: &Pool, ctx: &str) {
    let rep = pool.verify().unwrap_or_else(|e| panic!("{ctx}: verify failed to run: {e}"));
    assert!(rep.errors.is_empty(), "{ctx}: verify found {} errors: {:#?}", rep.errors.len(), rep.errors);
    pool.check_invariants().unwrap_or_else(|e| panic!("{ctx}: invariants: {e}"));
}
