//! `tarn inject` through the daemon (issue 12): adding, listing and
//! clearing fault injection handlers on a live pool's devices, what each
//! kind does to the pool as `pool status` shows it, and bad input.
//!
//! Invariants checked:
//! - the list shows every handler with its id, pool, device, guid, I/O
//!   type, error and frequency; `-c ID` removes that one, `-c all` the
//!   rest; a device is named by its path (relative to the caller too) or
//!   its guid;
//! - checksum damage is counted as CKSUM by a scrub, which repairs it,
//!   and the device file is byte for byte what it was: the damage never
//!   reached it;
//! - injected write errors fault the device; a vanished device is REMOVED
//!   and suspends the pool, which `export -f` closes and an import brings
//!   back intact;
//! - reads through the mount succeed while one copy of `copies=2` fails;
//! - every bad input is one error line naming the thing, exit 1 (usage
//!   errors of the parser, exit 2), and changes nothing; export is refused
//!   while handlers are in place; a daemon stop ends them.

mod common;

use common::{noise, Env};
use tarn_engine::posix::{FileSystem, PosixFs, PosixOptions};
use tarn_engine::{OpenOptions, Pool};
use tarn_ondisk::bp::Dva;

/// A pool "tank" with no mount on two 128 MiB files, root properties `-O`
/// `props`; (a.img, b.img) paths.
fn two_device_pool(e: &Env, props: &[&str]) -> (String, String) {
    let (a, b) = (e.path("a.img"), e.path("b.img"));
    let mut args = vec!["pool", "create", "-m", "none"];
    for p in props {
        args.extend(["-O", p]);
    }
    args.extend(["tank", &a, &b, "--size", "128M"]);
    e.ok(&args);
    (a, b)
}

/// The rows of `tarn inject`'s list, split into columns.
fn handlers(e: &Env) -> Vec<Vec<String>> {
    let out = e.ok(&["inject"]);
    if out.trim() == "No handlers registered." {
        return Vec::new();
    }
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    assert_eq!(header, ["ID", "POOL", "DEVICE", "GUID", "TYPE", "ERROR", "FREQ", "INJECTED"], "{out}");
    lines.map(|l| l.split_whitespace().map(String::from).collect()).collect()
}

/// The id in `added handler ID to …`.
fn added_id(out: &str) -> String {
    out.strip_prefix("added handler ").and_then(|r| r.split_whitespace().next()).unwrap_or_else(|| panic!("no handler id in: {out}")).to_string()
}

/// The READ, WRITE and CKSUM counts and the state of `dev` in `pool status`.
fn device_line(e: &Env, dev: &str) -> (String, u64, u64, u64) {
    let st = e.ok(&["pool", "status", "tank"]);
    let line = st.lines().find(|l| l.trim_start().starts_with(dev)).unwrap_or_else(|| panic!("{dev} in: {st}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    let n = |i: usize| f[f.len() - 3 + i].parse::<u64>().unwrap_or_else(|_| panic!("a count in: {line}"));
    (f[1].to_string(), n(0), n(1), n(2))
}

#[test]
fn handlers_are_added_listed_and_cleared() {
    let mut e = Env::plain("inject-list");
    let (a, b) = two_device_pool(&e, &[]);
    assert!(handlers(&e).is_empty());
    let one = added_id(&e.ok(&["inject", "-d", &a, "-e", "io", "-T", "read", "tank"]));
    let two = added_id(&e.ok(&["inject", "-d", &b, "-e", "checksum", "-f", "50", "tank"]));
    let rows = handlers(&e);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0][..3], [one.clone(), "tank".into(), a.clone()]);
    assert_eq!(rows[0][4..7], ["read".to_string(), "io".into(), "100%".into()]);
    assert_eq!(rows[1][..3], [two.clone(), "tank".into(), b.clone()]);
    assert_eq!(rows[1][4..7], ["all".to_string(), "checksum".into(), "50%".into()]);
    // By guid, and by a path relative to the caller.
    let guid = rows[1][3].clone();
    let three = added_id(&e.ok(&["inject", "-d", &guid, "-D", "10:2", "-T", "write", "tank"]));
    e.cwd = Some(e.dir.clone());
    let four = added_id(&e.ok(&["inject", "-d", "a.img", "-f", "0.5", "tank"]));
    e.cwd = None;
    let rows = handlers(&e);
    let find = |id: &str| rows.iter().find(|r| r[0] == id).unwrap_or_else(|| panic!("handler {id} in {rows:?}")).clone();
    assert_eq!(find(&three)[2..7], [b.clone(), guid.clone(), "write".into(), "delay".into(), "10ms:2".into()]);
    assert_eq!((find(&four)[2].as_str(), find(&four)[6].as_str()), (a.as_str(), "0.5%"));

    assert_eq!(e.ok(&["inject", "-c", &two]).trim(), format!("removed handler {two}"));
    let ids: Vec<String> = handlers(&e).into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(ids, [one, three, four]);
    assert!(e.ok(&["inject", "-c", "all"]).contains("(3)"));
    assert!(handlers(&e).is_empty());
}

/// A scrub counts and repairs the damage; one after clearing finds
/// none. (That the device's bytes stay untouched is pinned here for a
/// file's blocks by `reads_through_the_mount_…`, and for the whole device
/// by the engine's tests/inject.rs: a scrub may sync txgs of its own.)
#[test]
fn a_scrub_under_checksum_damage_counts_and_repairs_it() {
    let e = Env::plain("inject-cksum");
    let (_, b) = two_device_pool(&e, &[]);
    e.ok(&["inject", "-d", &b, "-e", "checksum", "tank"]);
    e.ok(&["pool", "scrub", "-w", "tank"]);
    let (state, read, write, cksum) = device_line(&e, &b);
    assert_eq!((state.as_str(), read, write), ("ONLINE", 0, 0));
    assert!(cksum > 0, "the pool's metadata copies on b.img were damaged on the way: {cksum}");
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("scan: scrub repaired") && st.contains("with 0 errors"), "every block had a good copy on a.img: {st}");
    assert!(handlers(&e)[0][7].parse::<u64>().unwrap() > 0, "the handler counts what it damaged");
    e.ok(&["inject", "-c", "all"]);
    e.ok(&["pool", "clear", "tank"]);
    e.ok(&["pool", "scrub", "-w", "tank"]);
    assert_eq!(device_line(&e, &b).3, 0, "a scrub without the handler finds nothing");
}

#[test]
fn write_errors_fault_the_device_and_a_vanished_device_suspends_the_pool() {
    let e = Env::plain("inject-fault");
    let (a, b) = two_device_pool(&e, &[]);
    e.ok(&["inject", "-d", &b, "-e", "nxio", "tank"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("state: SUSPENDED"), "{st}");
    assert_eq!(device_line(&e, &b).0, "REMOVED");
    assert!(st.contains("vanished") && st.contains("tarn inject"), "the reason says it was injected: {st}");
    assert!(e.fails(&["pool", "export", "tank"]).contains("export -f"));
    e.ok(&["inject", "-c", "all"]);
    assert_eq!(device_line(&e, &b).0, "REMOVED", "the leaf stays removed, as for a real device");
    assert!(e.ok(&["pool", "export", "-f", "tank"]).contains("without syncing"));
    e.ok(&["pool", "import", "-d", &e.dir.display().to_string(), "-m", "none", "tank"]);
    assert!(e.ok(&["pool", "status", "tank"]).contains("state: ONLINE"), "back, intact");

    e.ok(&["inject", "-d", &a, "-e", "io", "-T", "write", "tank"]);
    let err = e.fails(&["pool", "set", "comment=dirty", "tank"]);
    assert!(err.contains("a.img") && err.contains("tarn inject"), "the failed sync names the device and the injection: {err}");
    let (state, _, write, _) = device_line(&e, &a);
    assert!(state == "FAULTED" && write > 0, "{state} {write}");
    assert!(e.ok(&["pool", "status", "tank"]).contains("state: SUSPENDED"));
}

/// Every copy of every data block of `name` in the root dataset of the
/// pool on `imgs`, read in this process (the daemon stopped).
fn file_copies(imgs: &[&str], name: &str) -> Vec<Dva> {
    let paths: Vec<std::path::PathBuf> = imgs.iter().map(std::path::PathBuf::from).collect();
    let pool = Pool::open(&paths, &OpenOptions { readonly: true, ..Default::default() }).unwrap();
    let os = pool.root().clone();
    let fs = PosixFs::open(os.clone(), PosixOptions { readonly: true, ..Default::default() }).unwrap();
    let ino = fs.lookup(fs.root(), name.as_bytes()).unwrap().ino;
    let tree = os.tree(ino, 10_000).unwrap();
    tree.iter().filter(|(level, _, _)| *level == 0).flat_map(|(_, _, bp)| bp.dva).filter(|d| !d.is_empty()).collect()
}

/// The bytes of copy `d` in image `img`.
fn copy_bytes(img: &str, d: &Dva) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(img).unwrap();
    f.seek(SeekFrom::Start(d.offset)).unwrap();
    let mut b = vec![0u8; d.asize as usize];
    f.read_exact(&mut b).unwrap();
    b
}

/// An administrator's rehearsal on a mounted `copies=2` pool: reads of a
/// file succeed while one device fails every read, and while the other
/// returns damaged data, which scrub repairs; the file's blocks on the
/// damaged device are byte for byte what they were.
#[test]
fn reads_through_the_mount_succeed_while_one_copy_fails_or_is_damaged() {
    let Some(e) = Env::real("inject-mount") else { return };
    let (a, b) = (e.path("a.img"), e.path("b.img"));
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "-O", "copies=2", "-O", "compression=off", "tank", &a, &b, "--size", "128M"]);
    let data = noise(3 << 20, 4);
    std::fs::write(format!("{mnt}/f"), &data).unwrap();
    e.ok(&["pool", "sync", "tank"]);
    e.ok(&["daemon", "stop"]);
    let on_b: Vec<Dva> = file_copies(&[&a, &b], "f").into_iter().filter(|d| d.vdev == 1).collect();
    assert!(on_b.len() >= 24, "copies=2 of 24 records: one of each on b.img: {}", on_b.len());
    let before: Vec<Vec<u8>> = on_b.iter().map(|d| copy_bytes(&b, d)).collect();

    // A restart before each: nothing of the file is cached, in the daemon
    // or the kernel.
    e.ok(&["pool", "status", "tank"]);
    e.ok(&["inject", "-d", &a, "-e", "io", "-T", "read", "tank"]);
    assert!(std::fs::read(format!("{mnt}/f")).unwrap() == data, "every block served from its other copy");
    let (state, read, _, _) = device_line(&e, &a);
    assert!(state == "ONLINE" && read > 0, "{state} {read}");
    e.ok(&["daemon", "stop"]);

    e.ok(&["pool", "status", "tank"]);
    e.ok(&["inject", "-d", &b, "-e", "checksum", "tank"]);
    assert!(std::fs::read(format!("{mnt}/f")).unwrap() == data, "damaged copies are never returned");
    assert!(device_line(&e, &b).3 > 0, "some blocks were read from b.img first");
    e.ok(&["pool", "scrub", "-w", "tank"]);
    assert!(e.ok(&["pool", "status", "tank"]).contains("with 0 errors"));
    e.ok(&["inject", "-c", "all"]);
    for (d, bytes) in on_b.iter().zip(&before) {
        assert!(copy_bytes(&b, d) == *bytes, "the copy at {:#x} on b.img is unchanged", d.offset);
    }
    assert!(std::fs::read(format!("{mnt}/f")).unwrap() == data);
    assert!(e.ok(&["pool", "status", "tank"]).contains("state: ONLINE"));
}

#[test]
fn bad_input_is_refused_naming_the_thing_and_changes_nothing() {
    let e = Env::plain("inject-bad");
    let (a, _) = two_device_pool(&e, &[]);
    let c = e.path("c.img");
    std::fs::File::create(&c).unwrap().set_len(64 << 20).unwrap();
    e.ok(&["pool", "add", "tank", "cache", &c]);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["-d", &a, "nosuch"], "no such pool 'nosuch'"),
        (vec!["-d", "/no/such.img", "tank"], "no device '/no/such.img' in pool 'tank'"),
        (vec!["-d", "12345", "tank"], "no device '12345'"),
        (vec!["-d", &c, "tank"], "is a cache device of pool 'tank'"),
        (vec!["-d", &a, "-f", "0", "tank"], "invalid frequency '0'"),
        (vec!["-d", &a, "-f", "100.5", "tank"], "invalid frequency '100.5'"),
        (vec!["-d", &a, "-f", "abc", "tank"], "invalid frequency 'abc'"),
        (vec!["-d", &a, "-f", "-5", "tank"], "invalid frequency '-5'"),
        (vec!["-d", &a, "-D", "-5", "tank"], "invalid delay '-5'"),
        (vec!["-d", &a, "-D", "0", "tank"], "invalid delay '0'"),
        (vec!["-d", &a, "-D", "20000", "tank"], "above the cap of 10000 ms (10 s)"),
        (vec!["-d", &a, "-D", "10:0", "tank"], "invalid delay '10:0'"),
        (vec!["-d", &a, "-D", "ten", "tank"], "invalid delay 'ten'"),
        (vec!["-d", &a, "-e", "nxio", "-f", "50", "tank"], "takes neither -T nor -f"),
        (vec!["-d", &a, "-e", "checksum", "-T", "write", "tank"], "cannot apply to writes"),
        (vec!["-c", "999999"], "no handler 999999"),
        (vec!["-c", "x"], "invalid handler id 'x'"),
    ];
    for (args, want) in &cases {
        let full: Vec<&str> = std::iter::once("inject").chain(args.iter().copied()).collect();
        let err = e.fails(&full);
        assert!(err.contains(want), "tarn {full:?}: wanted '{want}' in: {err}");
    }
    let usage: Vec<Vec<&str>> = vec![vec!["-c", "1", "-d", &a, "tank"], vec!["-d", &a, "-e", "io", "-D", "10", "tank"], vec!["-d", &a], vec!["tank"], vec!["-d", &a, "-e", "bogus", "tank"], vec!["-d", &a, "-T", "flush", "tank"]];
    for args in &usage {
        let full: Vec<&str> = std::iter::once("inject").chain(args.iter().copied()).collect();
        assert_eq!(e.run(&full).status.code(), Some(2), "tarn {full:?} is a usage error");
    }
    assert!(handlers(&e).is_empty(), "nothing was added");
    assert!(e.ok(&["pool", "status", "tank"]).contains("state: ONLINE"));
}

#[test]
fn export_waits_for_handlers_to_be_cleared_and_a_daemon_stop_ends_them() {
    let e = Env::plain("inject-export");
    let (a, _) = two_device_pool(&e, &[]);
    let id = added_id(&e.ok(&["inject", "-d", &a, "-e", "io", "-T", "write", "tank"]));
    let err = e.fails(&["pool", "export", "tank"]);
    assert!(err.contains(&format!("fault injection handlers ({id})")) && err.contains("tarn inject -c"), "{err}");
    assert!(e.fails(&["pool", "destroy", "tank"]).contains("cannot destroy pool 'tank'"));
    assert!(e.ok(&["pool", "status", "tank"]).contains("state: ONLINE"), "nothing changed");
    // A stop closes the pool cleanly: the handler does not fail its final sync.
    e.ok(&["daemon", "stop"]);
    assert!(e.ok(&["pool", "status", "tank"]).contains("state: ONLINE"));
    assert!(handlers(&e).is_empty(), "handlers do not outlive the daemon");
    e.ok(&["pool", "export", "tank"]);
}
