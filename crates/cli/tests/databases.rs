//! Real databases on a mount, the daemon SIGKILLed under their load (issue
//! 13, "real programs"): SQLite (Debian's `sqlite3` command) in rollback
//! journal and WAL mode with `synchronous=FULL` and `EXTRA`, and PostgreSQL
//! 15 (Debian's package: `initdb`, `postgres`, `pgbench`, `pg_amcheck`).
//! The client reports every transaction whose commit returned; the daemon
//! is killed mid-load with `zfs_txg_timeout` an hour (the load has synced
//! no txg since it started: only the intent log can hold its commits); the
//! restarted daemon imports the pool and mounts the dataset (replaying its
//! log); then the database's own recovery runs, its integrity check passes
//! and every transaction the client saw committed is there.
//!
//! The negative control runs the same SQLite load with `sync=disabled`:
//! the check must find acknowledged commits lost, or the test proves nothing.
//!
//! Each test skips (saying why) where its programs are not installed;
//! `.ci/run` installs them (`sqlite3`, `postgresql`).

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Env;

fn have(test: &str, prog: &str) -> bool {
    let ok = Command::new(prog).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipping {test}: {prog} is not installed (apt-get install sqlite3 postgresql)");
    }
    ok
}

/// A pool mounted at the returned path, txgs held off for an hour so that
/// nothing the load commits is synced by a txg before the kill.
fn pool(e: &Env, sync: &str) -> String {
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "tank", &e.path("a.img"), "--size", "512M"]);
    e.ok(&["set", &format!("sync={sync}"), "tank"]);
    e.ok(&["tunable", "set", "zfs_txg_timeout=3600"]);
    mnt
}

/// Lines of `child`'s stdout, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Collects `committed N` lines until `want` ids were seen (then calls
/// `at_want` once) and the writer exits; the ids, and the writer's stderr.
fn committed_ids(mut child: Child, want: usize, at_want: impl FnOnce(), what: &str) -> (BTreeSet<u64>, String) {
    let rx = lines_of(&mut child);
    let mut ids = BTreeSet::new();
    let mut at_want = Some(at_want);
    let t = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(l) => {
                if let Some(n) = l.strip_prefix("committed ") {
                    ids.insert(n.trim().parse::<u64>().unwrap());
                }
                if ids.len() >= want {
                    if let Some(f) = at_want.take() {
                        f();
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if t.elapsed() > Duration::from_secs(240) {
            let _ = child.kill();
            panic!("{what}: the writer did not finish within 240 s ({} commits seen)", ids.len());
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(at_want.is_none(), "{what}: the writer stopped after {} commits, before the kill: {}", ids.len(), String::from_utf8_lossy(&out.stderr));
    (ids, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The SQLite writer: one transaction per id (a row of 200-3,200 random
/// bytes, an index entry, a counter update), `committed N` printed when its
/// COMMIT returned; `.bail on` stops it at the first error (a COMMIT the
/// dead mount failed prints nothing).
fn sqlite_script(dir: &str, journal: &str, synchronous: &str, n: u64) -> String {
    let mut s = format!(".bail on\nPRAGMA journal_mode={journal};\nPRAGMA synchronous={synchronous};\n");
    for i in 1..=n {
        s += &format!(
            "BEGIN; INSERT INTO t(id, v) VALUES ({i}, randomblob({})); UPDATE c SET n = n + 1; COMMIT;\nSELECT 'committed {i}';\n",
            200 + (i * 7919) % 3000
        );
    }
    let path = format!("{dir}/load-{journal}-{synchronous}.sql");
    std::fs::write(&path, s).unwrap();
    path
}

fn sqlite(db: &str, sql: &str) -> std::process::Output {
    Command::new("sqlite3").args(["-bail", db, sql]).output().expect("sqlite3 runs")
}

/// What a SQLite database holds after the crash: the ids in its table when
/// its integrity check passes and its counter matches its rows (no
/// transaction half applied), else what is wrong.
fn sqlite_check(db: &str) -> Result<BTreeSet<u64>, String> {
    if !Path::new(db).exists() {
        return Err("the database file is gone".into());
    }
    let o = sqlite(db, "PRAGMA integrity_check;");
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    if !o.status.success() || out != "ok" {
        return Err(format!("integrity_check: {out} {}", String::from_utf8_lossy(&o.stderr)));
    }
    let o = sqlite(db, "SELECT id FROM t ORDER BY id;");
    if !o.status.success() {
        return Err(format!("select: {}", String::from_utf8_lossy(&o.stderr)));
    }
    let have: BTreeSet<u64> = String::from_utf8_lossy(&o.stdout).lines().map(|l| l.trim().parse().unwrap()).collect();
    let o = sqlite(db, "SELECT n FROM c;");
    let n: usize = String::from_utf8_lossy(&o.stdout).trim().parse().map_err(|_| "no counter row".to_string())?;
    if n != have.len() {
        return Err(format!("counter {n} but {} rows: a transaction half applied", have.len()));
    }
    Ok(have)
}

/// The ids of `ids` not in `have`.
fn missing(ids: &BTreeSet<u64>, have: &BTreeSet<u64>) -> Vec<u64> {
    ids.difference(have).copied().collect()
}

/// Runs the SQLite load on a fresh pool with `sync`, kills the daemon after
/// `kill_after` commits, restarts it; what the check found.
/// The ids the client saw committed, and what the check found.
type Outcome = (BTreeSet<u64>, Result<BTreeSet<u64>, String>);

fn sqlite_crash(name: &str, sync: &str, journal: &str, synchronous: &str, kill_after: usize) -> Option<Outcome> {
    if !have(name, "sqlite3") {
        return None;
    }
    let e = Env::real(name)?;
    let mnt = pool(&e, sync);
    let db = format!("{mnt}/test.db");
    let o = sqlite(&db, &format!("PRAGMA journal_mode={journal}; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB); CREATE INDEX tv ON t(length(v)); CREATE TABLE c(n INTEGER); INSERT INTO c VALUES (0);"));
    assert!(o.status.success(), "schema: {}", String::from_utf8_lossy(&o.stderr));
    // The schema is in a synced txg: what follows lives only in the log.
    e.ok(&["pool", "sync", "tank"]);
    let script = sqlite_script(&e.path(""), journal, synchronous, 20_000);
    let child = Command::new("stdbuf")
        .args(["-oL", "sqlite3", "-bail", &db])
        .stdin(std::fs::File::open(&script).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sqlite3 runs");
    let (ids, err) = committed_ids(child, kill_after, || {
        let pid = e.pid().expect("pid");
        // SAFETY: killing our test's own daemon.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }, name);
    eprintln!("{name}: {} commits acknowledged before the writer stopped ({})", ids.len(), err.trim());
    restart_after_kill(&e, &db);
    let got = sqlite_check(&db);
    match &got {
        Ok(have) => eprintln!("{name}: after the restart: integrity ok, {} rows, {} acknowledged ids missing", have.len(), missing(&ids, have).len()),
        Err(why) => eprintln!("{name}: after the restart: {why}"),
    }
    if sync != "disabled" {
        let v = e.ok(&["inspect", "tank", "--verify"]);
        assert!(!v.contains("ERROR"), "{v}");
    }
    Some((ids, got))
}

/// After the load's hook SIGKILLed the daemon: starts it again (a command
/// to the daemon starts a new one, which imports the pool from its cache
/// and mounts it, replaying the log); waits for `probe` to be visible.
fn restart_after_kill(e: &Env, probe: &str) {
    let pid = e.pid().expect("pid");
    e.wait_killed(pid);
    let status = e.ok(&["pool", "status", "tank"]);
    assert!(status.contains("state: ONLINE"), "{status}");
    common::wait_for("the mount to come back", || Path::new(probe).exists());
}

/// Waits up to `secs` for `child` to exit; its output.
fn wait_output(mut child: Child, secs: u64) -> std::process::Output {
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            panic!("{child:?} did not finish within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `last_may_go`: the last acknowledged transaction may be rolled back.
/// SQLite documents that of `synchronous=FULL` with a rollback journal: a
/// transaction commits by unlinking its journal, and FULL does not sync the
/// directory after that unlink (EXTRA does), so after a crash the journal
/// may be back, hot, and roll the transaction back. The unlink becomes
/// durable with the next fsync on the dataset (the next transaction's
/// journal sync commits the log's namespace records), so only the last
/// one can go.
fn sqlite_survives(name: &str, journal: &str, synchronous: &str, last_may_go: bool) {
    let Some((ids, got)) = sqlite_crash(name, "standard", journal, synchronous, 300) else { return };
    assert!(ids.len() >= 300, "{name}: {} commits", ids.len());
    let have = got.unwrap_or_else(|why| panic!("{name}: {why}"));
    let lost = missing(&ids, &have);
    let last = *ids.last().unwrap();
    assert!(lost.is_empty() || last_may_go && lost == [last], "{name}: {} of {} acknowledged ids missing (first {:?})", lost.len(), ids.len(), &lost[..lost.len().min(5)]);
}

#[test]
fn sqlite_rollback_journal_full_survives_a_daemon_sigkill() {
    sqlite_survives("sqlite-delete-full", "DELETE", "FULL", true);
}

#[test]
fn sqlite_rollback_journal_extra_survives_a_daemon_sigkill() {
    sqlite_survives("sqlite-delete-extra", "DELETE", "EXTRA", false);
}

#[test]
fn sqlite_wal_full_survives_a_daemon_sigkill() {
    sqlite_survives("sqlite-wal-full", "WAL", "FULL", false);
}

#[test]
fn sqlite_wal_extra_survives_a_daemon_sigkill() {
    sqlite_survives("sqlite-wal-extra", "WAL", "EXTRA", false);
}

/// The negative control: with `sync=disabled` fsync returns at once and
/// the commits live only in the daemon's memory, so the kill loses what
/// the client was told was committed — and the check says so.
#[test]
fn sqlite_with_sync_disabled_loses_acknowledged_commits() {
    for journal in ["DELETE", "WAL"] {
        let name = format!("sqlite-nosync-{}", journal.to_lowercase());
        let Some((ids, got)) = sqlite_crash(&name, "disabled", journal, "FULL", 300) else { return };
        assert!(ids.len() >= 300, "{name}: {} commits", ids.len());
        // Lost: the database gone or damaged, or acknowledged ids missing
        // (more than the last, which FULL may lose anyway).
        if let Ok(have) = got {
            let lost = missing(&ids, &have);
            assert!(lost.len() > 1, "{name}: sync=disabled lost {lost:?} of {} acknowledged commits: the check cannot see a loss", ids.len());
        }
    }
}

// ---- PostgreSQL ----

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Runs `prog` (from PG_BIN) as the postgres user.
fn as_postgres(prog: &str) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--", &format!("{PG_BIN}/{prog}")]);
    c
}

fn pg_ok(mut c: Command, what: &str) -> String {
    c.stdin(Stdio::null());
    let o = common::within(c, 300);
    assert!(o.status.success(), "{what}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A postgres server on `data`, listening only on a socket in `sock`; in a
/// process group of its own, so the whole server can be killed by its id.
struct Postgres {
    child: Child,
    sock: String,
}

impl Postgres {
    fn start(data: &str, sock: &str, log: &str) -> Postgres {
        let mut c = as_postgres("postgres");
        c.args(["-D", data, "-k", sock, "-c", "listen_addresses=", "-c", "port=5432", "-c", "shared_buffers=32MB", "-c", "max_wal_size=256MB"]);
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(log).unwrap()).process_group(0);
        let child = c.spawn().expect("postgres runs");
        let p = Postgres { child, sock: sock.to_string() };
        let t = Instant::now();
        loop {
            let ready = as_postgres("pg_isready").args(["-h", sock, "-p", "5432", "-q"]).status().is_ok_and(|s| s.success());
            if ready {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(120), "postgres did not start: {}", std::fs::read_to_string(log).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }
    fn psql(&self, sql: &str) -> String {
        let mut c = as_postgres("psql");
        c.args(["-h", &self.sock, "-p", "5432", "-d", "postgres", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]);
        pg_ok(c, sql).trim().to_string()
    }
    /// SIGKILLs the server's process group (the postmaster and its children).
    fn kill(mut self) {
        let pg = self.child.id() as i32;
        // SAFETY: the process group of the server this test started.
        unsafe { libc::kill(-pg, libc::SIGKILL) };
        let _ = self.child.wait();
        // Children may outlive the postmaster for a moment.
        common::wait_for("postgres's processes to exit", || !group_alive(pg));
    }
    fn stop(self, data: &str) {
        let mut c = as_postgres("pg_ctl");
        c.args(["-D", data, "-m", "fast", "-w", "stop"]);
        let _ = common::within(c, 120);
        self.kill();
    }
}

#[test]
fn postgres_survives_a_daemon_sigkill_under_pgbench() {
    let name = "postgres";
    if !Path::new(&format!("{PG_BIN}/postgres")).exists() || !have(name, "runuser") {
        eprintln!("skipping {name}: PostgreSQL 15 is not installed in {PG_BIN} (apt-get install postgresql)");
        return;
    }
    let Some(uid) = users_uid("postgres") else {
        eprintln!("skipping {name}: no postgres user");
        return;
    };
    let Some(e) = Env::real(name) else { return };
    let mnt = pool(&e, "standard");
    let data = format!("{mnt}/pgdata");
    std::fs::create_dir(&data).unwrap();
    let sock = e.path("sock");
    std::fs::create_dir(&sock).unwrap();
    for d in [&data, &sock] {
        let c = std::ffi::CString::new(d.as_str()).unwrap();
        // SAFETY: a valid path; the directories are this test's.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), uid, u32::MAX) }, 0, "chown {d}");
    }
    let mut init = as_postgres("initdb");
    init.args(["-D", &data, "-A", "trust", "-U", "postgres", "--no-locale", "-E", "UTF8", "--no-instructions"]);
    pg_ok(init, "initdb");
    let log = e.path("postgres.log");
    let pg = Postgres::start(&data, &sock, &log);
    let mut init = as_postgres("pgbench");
    init.args(["-h", &sock, "-p", "5432", "-i", "-s", "2", "-q", "postgres"]);
    pg_ok(init, "pgbench -i");
    pg.psql("CREATE TABLE acked(id int PRIMARY KEY, pad text)");
    pg.psql("CHECKPOINT");
    e.ok(&["pool", "sync", "tank"]);

    // The load: pgbench's TPC-B transactions from 4 clients, and a psql
    // client inserting ids one transaction each, printing each id once
    // its COMMIT returned.
    let mut bench = as_postgres("pgbench");
    bench.args(["-h", &sock, "-p", "5432", "-c", "4", "-j", "2", "-T", "120", "-n", "postgres"]);
    let bench = bench.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("pgbench runs");
    let mut script = String::new();
    for i in 1..=200_000 {
        script += &format!("INSERT INTO acked VALUES ({i}, repeat('x', {}));\n\\echo committed {i}\n", (i * 37) % 500);
    }
    let script_path = e.path("acked.sql");
    std::fs::write(&script_path, script).unwrap();
    std::fs::set_permissions(&script_path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let mut writer = Command::new("runuser");
    writer.args(["-u", "postgres", "--", "stdbuf", "-oL", &format!("{PG_BIN}/psql")]);
    writer.args(["-h", &sock, "-p", "5432", "-d", "postgres", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", &script_path]);
    let writer = writer.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("psql runs");
    let t0 = Instant::now();
    let (ids, err) = committed_ids(writer, 1500, || {
        // Let pgbench run a few seconds too.
        std::thread::sleep(Duration::from_secs(3).saturating_sub(t0.elapsed()));
        let pid = e.pid().expect("pid");
        // SAFETY: killing our test's own daemon.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }, name);
    let b = wait_output(bench, 120);
    let bench_out = String::from_utf8_lossy(&b.stdout).into_owned();
    let processed: u64 = bench_out
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .unwrap_or_else(|| panic!("pgbench's report: {bench_out}{}", String::from_utf8_lossy(&b.stderr)));
    eprintln!("{name}: {} ids acknowledged ({}), pgbench: {processed} transactions processed", ids.len(), err.trim());
    pg.kill();
    restart_after_kill(&e, &format!("{data}/PG_VERSION"));
    // The server's process group is gone (`kill` waited for it), but its
    // lock file names a pid the machine may have handed out again since —
    // postgres then refuses to start ("lock file already exists"). Removed,
    // as an administrator would after making sure no server runs.
    let _ = std::fs::remove_file(format!("{data}/postmaster.pid"));

    // Crash recovery replays postgres's WAL; then its checks.
    let pg = Postgres::start(&data, &sock, &e.path("postgres2.log"));
    let recovered = std::fs::read_to_string(e.path("postgres2.log")).unwrap_or_default();
    assert!(recovered.contains("database system was interrupted") || recovered.contains("not properly shut down"), "postgres ran its crash recovery: {recovered}");
    let have: BTreeSet<u64> = pg.psql("SELECT id FROM acked ORDER BY id").lines().map(|l| l.trim().parse().unwrap()).collect();
    let missing: Vec<_> = ids.difference(&have).collect();
    assert!(missing.is_empty(), "{} of {} acknowledged ids missing (first {:?})", missing.len(), ids.len(), missing.iter().take(5).collect::<Vec<_>>());
    let history: u64 = pg.psql("SELECT count(*) FROM pgbench_history").parse().unwrap();
    assert!(history >= processed, "pgbench_history has {history} rows, pgbench reported {processed} transactions processed");
    // TPC-B keeps the branches' balances equal to the sum of the history's deltas.
    let sums = pg.psql("SELECT (SELECT sum(bbalance) FROM pgbench_branches) = (SELECT coalesce(sum(delta), 0) FROM pgbench_history) AND (SELECT sum(abalance) FROM pgbench_accounts) = (SELECT coalesce(sum(delta), 0) FROM pgbench_history)");
    assert_eq!(sums, "t", "balances match the history");
    let mut check = as_postgres("pg_amcheck");
    check.args(["-h", &sock, "-p", "5432", "--install-missing", "--heapallindexed", "--all"]);
    let amcheck = pg_ok(check, "pg_amcheck");
    eprintln!("{name}: after the restart: {} ids, {history} history rows, pg_amcheck clean{amcheck}", have.len());
    pg.stop(&data);
    let v = e.ok(&["inspect", "tank", "--verify"]);
    assert!(!v.contains("ERROR"), "{v}");
}

fn users_uid(user: &str) -> Option<u32> {
    let o = Command::new("id").args(["-u", user]).output().ok()?;
    String::from_utf8_lossy(&o.stdout).trim().parse().ok()
}

/// Whether a live (not zombie) process is in process group `pg`.
fn group_alive(pg: i32) -> bool {
    std::fs::read_dir("/proc").unwrap().filter_map(|d| std::fs::read_to_string(d.ok()?.path().join("stat")).ok()).any(|stat| {
        // pid (comm) state ppid pgrp ...
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else { return false };
        let f: Vec<&str> = rest.split(' ').collect();
        f.len() > 2 && f[0] != "Z" && f[2].parse::<i32>() == Ok(pg)
    })
}
