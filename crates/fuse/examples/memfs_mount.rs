//! Mounts the in-memory `MemFs` on a directory until stdin closes: the
//! ceiling of the FUSE glue and the kernel transport, with no storage
//! beneath: what a FUSE file system could reach here if its own work cost
//! nothing. Each line read from stdin prints the calls the file system has
//! had since the last line, per operation: what a workload costs in
//! requests.
//!
//! ```text
//! cargo run --release -p tarn-fuse --example memfs_mount -- DIR [THREADS] [writeback=0|1]
//! ```

use std::sync::Arc;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: memfs_mount DIR [THREADS] [WRITEBACK 0|1]");
        std::process::exit(2);
    };
    let mut opts = tarn_fuse::MountOptions { fsname: "memfs".into(), ..Default::default() };
    if let Some(t) = args.next() {
        opts.threads = t.parse().unwrap_or_else(|e| {
            eprintln!("threads {t}: {e}");
            std::process::exit(2)
        });
    }
    if let Some(w) = args.next() {
        opts.writeback_cache = w == "1";
    }
    let fs = Arc::new(tarn_fuse::MemFs::new());
    let h = match tarn_fuse::mount(fs.clone(), std::path::Path::new(&dir), &opts) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("mount {dir}: {e}");
            std::process::exit(1)
        }
    };
    println!("mounted on {dir}; Enter prints the calls so far, end of input unmounts");
    let mut seen = fs.all_calls();
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
        line.clear();
        let now = fs.all_calls();
        let since: Vec<String> = now.iter().map(|(op, n)| (op, n - seen.get(op).copied().unwrap_or(0))).filter(|(_, n)| *n > 0).map(|(op, n)| format!("{op} {n}")).collect();
        println!("calls: {}", since.join(", "));
        seen = now;
    }
    if let Err(e) = h.unmount() {
        eprintln!("unmount: {e}");
    }
}
