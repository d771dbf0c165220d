//! Block compression.
//!
//! A block is compressed when it is written and kept compressed only if that
//! saves at least 12.5 % (OpenZFS's rule): zstd is given an output buffer of
//! 7/8 of the input and gives up when it runs out; lz4 (whose fast path skips
//! ahead through incompressible input) compresses fully and is then checked.
//! Blocks of 64 KiB and more are first probed: three 4 KiB samples (start,
//! middle, end) are compressed, and if none of them shrinks by 12.5 % the
//! block is stored as is without compressing the rest — on incompressible
//! data (media, already-compressed files) that turns a full compression pass
//! and a copy of every byte into about 1 % of one (OpenZFS 2.2's zstd "early
//! abort" makes the same trade with an lz4 pass). A block whose samples all
//! look incompressible but which would compress elsewhere is stored
//! uncompressed: a small loss of ratio, never of data.
//! The result must also save a whole sector, or it is stored uncompressed (a
//! compressed block that occupies as many sectors as the original gains
//! nothing and costs a decompression on every read).
//!
//! All-zero blocks are not compressed but turned into holes by the caller
//! ([`is_zero`]).

use tarn_ondisk::bp::Compression;

use crate::error::{Error, Result};

/// The `compression` property: an algorithm plus its level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompressSetting {
    Off,
    Lz4,
    Zstd(i32),
}

impl CompressSetting {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "off" => Ok(CompressSetting::Off),
            "on" | "lz4" => Ok(CompressSetting::Lz4),
            "zstd" => Ok(CompressSetting::Zstd(3)),
            _ => {
                if let Some(l) = s.strip_prefix("zstd-") {
                    if let Ok(level) = l.parse::<i32>() {
                        if (1..=19).contains(&level) {
                            return Ok(CompressSetting::Zstd(level));
                        }
                    }
                }
                Err(Error::invalid(format!(
                    "bad compression '{}': expected off, on, lz4, zstd or zstd-1 … zstd-19",
                    s
                )))
            }
        }
    }

    pub fn name(self) -> String {
        match self {
            CompressSetting::Off => "off".into(),
            CompressSetting::Lz4 => "lz4".into(),
            CompressSetting::Zstd(3) => "zstd".into(),
            CompressSetting::Zstd(l) => format!("zstd-{}", l),
        }
    }

    pub fn algorithm(self) -> Compression {
        match self {
            CompressSetting::Off => Compression::Off,
            CompressSetting::Lz4 => Compression::Lz4,
            CompressSetting::Zstd(_) => Compression::Zstd,
        }
    }
}

/// True if every byte is zero (checked 16 bytes at a time).
pub fn is_zero(data: &[u8]) -> bool {
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        let w = u128::from_ne_bytes(c.try_into().expect("chunks_exact yields 16 bytes"));
        if w != 0 {
            return false;
        }
    }
    chunks.remainder().iter().all(|&b| b == 0)
}

/// Blocks at least this large are probed before being compressed.
const PROBE_MIN_BYTES: usize = 64 << 10;
const PROBE_SAMPLE_BYTES: usize = 4 << 10;

/// True when any of three samples of `src` compresses by 12.5 % with lz4.
fn probe_compressible(src: &[u8]) -> bool {
    let s = PROBE_SAMPLE_BYTES;
    let starts = [0, src.len() / 2 - s / 2, src.len() - s];
    let mut out = [0u8; PROBE_SAMPLE_BYTES + PROBE_SAMPLE_BYTES / 8 + 64];
    starts.iter().any(|&a| {
        let sample = &src[a..a + s];
        match lz4_flex::block::compress_into(sample, &mut out) {
            Ok(n) => n <= s - s / 8,
            Err(_) => true,
        }
    })
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Compresses `src`; returns the compressed bytes, or None when the block should
/// be stored as is. `sector` is the allocation unit: a result must save one.
/// (lz4_flex needs a worst-case-sized output buffer, so lz4 compresses the
/// whole block before the 12.5 % rule is applied; zstd stops at the limit.)
pub fn compress(setting: CompressSetting, src: &[u8], sector: usize) -> Option<Vec<u8>> {
    if setting == CompressSetting::Off || src.len() < 2 * 512.min(sector) {
        return None;
    }
    let limit = src.len() - src.len() / 8;
    if src.len() >= PROBE_MIN_BYTES && !probe_compressible(src) {
        return None;
    }
    let n;
    let mut out;
    match setting {
        CompressSetting::Off => return None,
        CompressSetting::Lz4 => {
            // lz4_flex insists on room for the worst case up front; a
            // per-thread scratch buffer avoids allocating it every block.
            let max = lz4_flex::block::get_maximum_output_size(src.len());
            let res = SCRATCH.with(|s| {
                let mut s = s.borrow_mut();
                if s.len() < max {
                    s.resize(max, 0);
                }
                let n = lz4_flex::block::compress_into(src, &mut s[..max]).ok()?;
                (n <= limit).then(|| s[..n].to_vec())
            });
            out = res?;
            n = out.len();
        }
        CompressSetting::Zstd(level) => {
            out = vec![0u8; limit];
            n = zstd::bulk::compress_to_buffer(src, &mut out, level).ok()?;
        }
    }
    if n > limit || n.div_ceil(sector) >= src.len().div_ceil(sector) && n > 104 {
        return None;
    }
    out.truncate(n);
    Some(out)
}

/// Decompresses `src` into exactly `dst.len()` bytes.
pub fn decompress(alg: Compression, src: &[u8], dst: &mut [u8]) -> Result<()> {
    let n = match alg {
        Compression::Off => {
            if src.len() != dst.len() {
                return Err(Error::corrupt("uncompressed block of the wrong size"));
            }
            dst.copy_from_slice(src);
            return Ok(());
        }
        Compression::Lz4 => lz4_flex::block::decompress_into(src, dst)
            .map_err(|e| Error::corrupt(format!("lz4 decompression failed: {}", e)))?,
        Compression::Zstd => zstd::bulk::decompress_to_buffer(src, dst)
            .map_err(|e| Error::corrupt(format!("zstd decompression failed: {}", e)))?,
    };
    if n != dst.len() {
        return Err(Error::corrupt(format!("decompressed to {} bytes, expected {}", n, dst.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn compressible_round_trip() {
        let src: Vec<u8> = (0..131072u32).map(|i| (i % 17) as u8).collect();
        for s in [CompressSetting::Lz4, CompressSetting::Zstd(3), CompressSetting::Zstd(19)] {
            let c = compress(s, &src, 4096).expect("compressible");
            assert!(c.len() < src.len() / 8);
            let mut out = vec![0u8; src.len()];
            decompress(s.algorithm(), &c, &mut out).unwrap();
            assert_eq!(out, src);
        }
    }

    #[test]
    fn incompressible_is_stored_raw() {
        let src = noise(131072, 7);
        assert!(compress(CompressSetting::Lz4, &src, 4096).is_none());
        assert!(compress(CompressSetting::Zstd(3), &src, 4096).is_none());
    }

    #[test]
    fn incompressible_blocks_are_probed_not_compressed() {
        // Noise with a compressible middle: the probe's middle sample sees it
        // and the whole block is compressed.
        let mut src = noise(1 << 20, 11);
        for b in src[300_000..800_000].iter_mut() {
            *b = 0;
        }
        assert!(probe_compressible(&src));
        assert!(compress(CompressSetting::Lz4, &src, 4096).is_some());
        // Pure noise: the probe says no.
        assert!(!probe_compressible(&noise(1 << 20, 12)));
    }

    #[test]
    fn must_save_a_sector() {
        // 8 KiB that compresses to a bit over 4 KiB saves nothing at 4 KiB sectors.
        let mut src = noise(4600, 3);
        src.resize(8192, 0);
        assert!(compress(CompressSetting::Lz4, &src, 4096).is_none());
        assert!(compress(CompressSetting::Lz4, &src, 512).is_some());
    }

    #[test]
    fn zero_detection() {
        assert!(is_zero(&[0u8; 4096]));
        assert!(is_zero(&[]));
        let mut v = vec![0u8; 4096];
        v[2049] = 1;
        assert!(!is_zero(&v));
        v[2049] = 0;
        v[4095] = 1;
        assert!(!is_zero(&v));
    }

    #[test]
    fn settings_parse() {
        assert_eq!(CompressSetting::parse("on").unwrap(), CompressSetting::Lz4);
        assert_eq!(CompressSetting::parse("zstd-7").unwrap(), CompressSetting::Zstd(7));
        assert!(CompressSetting::parse("zstd-99").is_err());
        assert!(CompressSetting::parse("gzip").is_err());
        assert_eq!(CompressSetting::parse("zstd").unwrap().name(), "zstd");
    }

    #[test]
    fn corrupt_input_is_an_error() {
        let mut out = vec![0u8; 4096];
        assert!(decompress(Compression::Lz4, &noise(100, 5), &mut out).is_err());
        assert!(decompress(Compression::Zstd, &noise(100, 5), &mut out).is_err());
    }
}
