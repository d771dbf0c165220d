//! Mounts the in-memory `MemFs` on a directory until Enter is pressed or
//! stdin closes: the ceiling of the FUSE glue and the kernel transport,
//! with no storage beneath: what a FUSE file system could reach here if
//! its own work cost nothing.
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
    let h = match tarn_fuse::mount(Arc::new(tarn_fuse::MemFs::new()), std::path::Path::new(&dir), &opts) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("mount {dir}: {e}");
            std::process::exit(1)
        }
    };
    println!("mounted on {dir}; press Enter to unmount");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    if let Err(e) = h.unmount() {
        eprintln!("unmount: {e}");
    }
}
