//! `tarn pool events` (issue 12, as `zpool events`): the pool's event ring
//! through the daemon.
//!
//! Invariants checked:
//! - a block of a file damaged on the image and read through the mount is
//!   listed as a checksum ereport (and the block lost as a data ereport);
//!   `-v` names the device, the dataset, the file, the object, the block
//!   and the copy's offset; `-H` drops the header and separates by tabs;
//!   the daemon log has one line per event; `-c` empties the ring;
//! - `-f` prints the events there are, then one posted after it started
//!   (for one pool, and for a pool created while it follows all), and the
//!   daemon serves other commands meanwhile;
//! - bad input (an unknown pool, `-c` with `-f`, `-v` or `-H`, two pools)
//!   is one clear error, nothing cleared.

mod common;

use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::process::{Child, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use common::{data_block, Env};

/// The lines a follower prints, as they come.
fn lines_of(child: &mut Child) -> Receiver<String> {
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits (at most 60 s: never hangs) for a line containing `want`.
fn wait_line(rx: &Receiver<String>, want: &str, seen: &mut Vec<String>) {
    let t = Instant::now();
    while !seen.iter().any(|l| l.contains(want)) {
        let left = Duration::from_secs(60).saturating_sub(t.elapsed());
        match rx.recv_timeout(left) {
            Ok(l) => seen.push(l),
            Err(e) => panic!("no line with '{want}' from the follower within 60 s ({e}); it printed: {seen:#?}"),
        }
    }
}

/// A follower of `args`, killed (by its own handle) when dropped.
struct Follower(Child);

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn follow(e: &Env, args: &[&str]) -> (Follower, Receiver<String>) {
    let mut c = e.cmd().args(args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("tarn runs");
    let rx = lines_of(&mut c);
    (Follower(c), rx)
}

/// A file's block damaged on the image (copies=1): reading it through
/// the mount fails; the events name what happened, down to the file and
/// the copy's offset.
#[test]
fn a_damaged_block_is_listed_and_named_down_to_the_file() {
    let Some(e) = Env::real("events-damage") else { return };
    let mnt = e.create("tank");
    let img = e.path("tank.img");
    std::fs::create_dir(format!("{mnt}/dir")).unwrap();
    std::fs::write(format!("{mnt}/dir/victim"), common::noise(300 << 10, 1)).unwrap();
    e.ok(&["pool", "sync", "tank"]);
    e.ok(&["daemon", "stop"]);
    let copies = data_block(&img, "tank", &["dir", "victim"], 1);
    assert_eq!(copies.len(), 1, "copies=1: {copies:?}");
    let offset = copies[0].offset;
    let mut f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(&[0x5a; 4096]).unwrap();
    f.sync_all().unwrap();
    drop(f);

    e.ok(&["pool", "list"]);
    common::wait_for("the root to be mounted", || common::is_mounted(&mnt));
    assert!(std::fs::read(format!("{mnt}/dir/victim")).is_err(), "a lost block reads as an error");

    let list = e.ok(&["pool", "events", "tank"]);
    let lines: Vec<&str> = list.lines().collect();
    assert!(lines[0].starts_with("TIME") && lines[0].ends_with("CLASS"), "{list}");
    let classes: Vec<&str> = lines[1..].iter().map(|l| l.split_whitespace().nth(1).unwrap_or("")).collect();
    for want in ["sysevent.fs.zfs.pool_create", "sysevent.fs.zfs.pool_import", "ereport.fs.zfs.checksum", "ereport.fs.zfs.data"] {
        assert!(classes.contains(&want), "{want} should be listed: {list}");
    }
    assert_eq!(classes.iter().filter(|c| **c == "ereport.fs.zfs.checksum").count(), 1, "one ereport per damaged copy: {list}");

    let v = e.ok(&["pool", "events", "-v", "tank"]);
    let ck = v.split("\n\n").find(|ev| ev.contains("ereport.fs.zfs.checksum")).expect("the checksum ereport");
    for want in [
        format!("vdev_path = \"{img}\""),
        "dataset = \"tank\"".to_string(),
        format!("file = \"{mnt}/dir/victim\""),
        "zio_level = 0".to_string(),
        "zio_blkid = 1".to_string(),
        format!("zio_offset = {:#x}", offset),
        "pool = \"tank\"".to_string(),
    ] {
        assert!(ck.lines().any(|l| l.trim() == want), "-v should show '{want}':\n{ck}");
    }
    assert!(ck.lines().any(|l| l.trim().starts_with("zio_object = ")), "{ck}");

    let h = e.ok(&["pool", "events", "-H", "tank"]);
    assert!(!h.contains("TIME") && h.lines().all(|l| l.split('\t').count() == 2), "-H: no header, tab-separated: {h}");
    assert_eq!(h.lines().count(), lines.len() - 1);

    let log = e.log();
    assert!(log.lines().any(|l| l.contains("pool 'tank': ereport.fs.zfs.checksum: checksum error on vdev 0") && l.contains(&format!("at offset {:#x} ", offset))), "{log}");
    assert!(log.lines().any(|l| l.contains("pool 'tank': sysevent.fs.zfs.pool_import")), "{log}");

    assert_eq!(e.ok(&["pool", "events", "-c", "tank"]).trim(), format!("cleared {} events", lines.len() - 1));
    assert_eq!(e.ok(&["pool", "events", "tank"]).lines().count(), 1, "only the header is left");
}

/// `-f` prints what there is, then what comes: a scrub of the pool it
/// follows, and a pool created while it follows every pool; the daemon
/// answers other commands meanwhile.
#[test]
fn follow_prints_events_posted_after_it_started() {
    let e = Env::plain("events-follow");
    e.ok(&["pool", "create", "-m", "none", "tank", &e.path("tank.img"), "--size", "128M"]);
    let (_one, rx) = follow(&e, &["pool", "events", "-f", "-H", "tank"]);
    let (_all, rx_all) = follow(&e, &["pool", "events", "-f"]);
    let (mut seen, mut seen_all) = (Vec::new(), Vec::new());
    wait_line(&rx, "sysevent.fs.zfs.pool_create", &mut seen);
    wait_line(&rx_all, "sysevent.fs.zfs.pool_create", &mut seen_all);
    e.ok(&["pool", "scrub", "-w", "tank"]);
    wait_line(&rx, "sysevent.fs.zfs.scrub_finish", &mut seen);
    assert!(seen.iter().any(|l| l.ends_with("\tsysevent.fs.zfs.scrub_start")), "{seen:?}");
    e.ok(&["pool", "create", "-m", "none", "other", &e.path("other.img"), "--size", "128M"]);
    wait_line(&rx_all, "sysevent.fs.zfs.scrub_finish", &mut seen_all);
    let t = Instant::now();
    while seen_all.iter().filter(|l| l.contains("sysevent.fs.zfs.pool_create")).count() < 2 {
        let l = rx_all.recv_timeout(Duration::from_secs(60).saturating_sub(t.elapsed())).unwrap_or_else(|_| panic!("the new pool's creation was not followed: {seen_all:#?}"));
        seen_all.push(l);
    }
    // A second scrub of tank, posted after the other pool's creation: by
    // the time the pool's follower prints it, it would have printed that
    // creation too, had it followed more than its pool.
    e.ok(&["pool", "scrub", "-w", "tank"]);
    let finished = |v: &Vec<String>| v.iter().filter(|l| l.contains("scrub_finish")).count();
    let t = Instant::now();
    while finished(&seen) < 2 {
        seen.push(rx.recv_timeout(Duration::from_secs(60).saturating_sub(t.elapsed())).unwrap_or_else(|_| panic!("the second scrub was not followed: {seen:#?}")));
    }
    assert_eq!(seen.iter().filter(|l| l.contains("pool_create")).count(), 1, "the pool's follower follows only its pool: {seen:#?}");
    assert!(e.ok(&["pool", "list", "-H", "-o", "name"]).contains("other"), "the daemon answers while two follow");
}

/// Bad input: one error each, and nothing cleared.
#[test]
fn bad_input_is_one_clear_error_and_clears_nothing() {
    let e = Env::plain("events-bad");
    e.ok(&["pool", "create", "-m", "none", "tank", &e.path("tank.img"), "--size", "128M"]);
    assert!(e.fails(&["pool", "events", "nosuch"]).contains("no such pool 'nosuch'"));
    assert!(e.fails(&["pool", "events", "-c", "nosuch"]).contains("no such pool 'nosuch'"));
    for flag in ["-f", "-v", "-H"] {
        let usage = e.run(&["pool", "events", "-c", flag, "tank"]);
        let err = String::from_utf8_lossy(&usage.stderr);
        assert!(usage.status.code() == Some(2) && err.contains("cannot be used with"), "-c {flag} is a usage error: {err}");
    }
    let two = e.run(&["pool", "events", "tank", "tank"]);
    assert_eq!(two.status.code(), Some(2), "one pool at most");
    assert!(e.ok(&["pool", "events", "-H", "tank"]).contains("sysevent.fs.zfs.pool_create"), "nothing was cleared");
}
