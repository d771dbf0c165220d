//! Arithmetic in GF(2⁸), the field RAID-Z's parity lives in.
//!
//! Elements are bytes. Addition is xor. Multiplication is of polynomials
//! over GF(2) modulo x⁸ + x⁴ + x³ + x² + 1 (0x11d, RAID-6's and OpenZFS's
//! choice), in which 2 generates every non-zero element: `2^i` for
//! `i in 0..255` are the 255 non-zero bytes, each once.
//!
//! Three forms of multiplication serve three needs:
//! - [`mul2_lanes`]: by 2 on eight bytes of a `u64` at once (SWAR), for
//!   parity generation, which only ever multiplies by 2 and 4 (Horner);
//! - [`mul`], [`inv`], [`pow`]: single elements through log/exp tables, for
//!   solving the small systems of reconstruction;
//! - [`MulTable`]: by one constant, a 256-entry table per coefficient, for
//!   applying a solved system to whole columns.
//!
//! The tables are computed at compile time from the polynomial.

/// The field's reducing polynomial, x⁸ + x⁴ + x³ + x² + 1.
pub const POLY: u16 = 0x11d;

/// `EXP[i] = 2^i`, for `i in 0..510`: doubled so a sum of two logs needs no
/// reduction modulo 255.
static EXP: [u8; 510] = exp_table();

/// `LOG[a] = i` with `2^i = a`, for `a != 0`; `LOG[0]` is unused.
static LOG: [u8; 256] = log_table();

const fn exp_table() -> [u8; 510] {
    let mut t = [0u8; 510];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 510 {
        t[i] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    t
}

const fn log_table() -> [u8; 256] {
    let exp = exp_table();
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

// 2 generates the field: its powers 0..255 are all distinct, so the log
// table is a bijection. Checked once, at compile time.
const _: () = {
    let exp = exp_table();
    let mut seen = [false; 256];
    let mut i = 0;
    while i < 255 {
        assert!(!seen[exp[i] as usize], "0x11d: 2 is not a generator");
        seen[exp[i] as usize] = true;
        i += 1;
    }
    assert!(exp[255] == 1);
};

/// `a · b`.
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
}

/// `1 / a`; `a` must not be zero.
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "GF(2^8): zero has no inverse");
    EXP[(255 - LOG[a as usize] as usize) % 255]
}

/// `g^e`; `g` must not be zero.
pub fn pow(g: u8, e: usize) -> u8 {
    assert!(g != 0, "GF(2^8): powers of zero are not used");
    EXP[(LOG[g as usize] as usize * (e % 255)) % 255]
}

/// The high bit of each byte lane.
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
/// The reduction (0x11d without its x⁸) in each byte lane.
const REDUCE: u64 = 0x1d1d_1d1d_1d1d_1d1d;

/// Each of the eight bytes of `x` multiplied by 2. A byte whose high bit is
/// set overflows into x⁸, which reduces to 0x1d; `(h << 1) − (h >> 7)`
/// turns each set high bit into a lane of 0xff (the borrow of a lane stops
/// at its own 0x100), selecting 0x1d there, without branches or a
/// multiplication.
#[inline(always)]
pub fn mul2_lanes(x: u64) -> u64 {
    let high = x & HIGH_BITS;
    let overflowed = (high << 1).wrapping_sub(high >> 7);
    ((x & !HIGH_BITS) << 1) ^ (overflowed & REDUCE)
}

/// Multiplication by one constant, as a table: one lookup per byte.
pub struct MulTable {
    product: [u8; 256],
    constant: u8,
}

impl MulTable {
    pub fn new(constant: u8) -> Self {
        let mut product = [0u8; 256];
        for (v, p) in product.iter_mut().enumerate() {
            *p = mul(constant, v as u8);
        }
        MulTable { product, constant }
    }

    /// `out = c · src`, byte by byte.
    pub fn set(&self, out: &mut [u8], src: &[u8]) {
        assert_eq!(out.len(), src.len());
        match self.constant {
            0 => out.fill(0),
            1 => out.copy_from_slice(src),
            _ => out.iter_mut().zip(src).for_each(|(o, s)| *o = self.product[*s as usize]),
        }
    }

    /// `out ^= c · src`, byte by byte.
    pub fn add(&self, out: &mut [u8], src: &[u8]) {
        assert_eq!(out.len(), src.len());
        match self.constant {
            0 => {}
            1 => out.iter_mut().zip(src).for_each(|(o, s)| *o ^= *s),
            _ => out.iter_mut().zip(src).for_each(|(o, s)| *o ^= self.product[*s as usize]),
        }
    }
}

/// `out = Σ cᵢ · srcᵢ` for one to three terms (table, source), in one pass
/// over the bytes: each output byte is written once, not once per term.
pub fn combine(out: &mut [u8], terms: &[(&MulTable, &[u8])]) {
    for (_, src) in terms {
        assert_eq!(src.len(), out.len());
    }
    match terms {
        [(t0, s0)] => t0.set(out, s0),
        [(t0, s0), (t1, s1)] => {
            let (p0, p1) = (&t0.product, &t1.product);
            for ((o, a), b) in out.iter_mut().zip(*s0).zip(*s1) {
                *o = p0[*a as usize] ^ p1[*b as usize];
            }
        }
        [(t0, s0), (t1, s1), (t2, s2)] => {
            let (p0, p1, p2) = (&t0.product, &t1.product, &t2.product);
            for (((o, a), b), c) in out.iter_mut().zip(*s0).zip(*s1).zip(*s2) {
                *o = p0[*a as usize] ^ p1[*b as usize] ^ p2[*c as usize];
            }
        }
        _ => panic!("combine of {} terms", terms.len()),
    }
}

/// Most unknowns a reconstruction solves for (RAID-Z3's three parities).
pub const SOLVE_MAX: usize = 3;

/// The inverse of the `n × n` matrix `a` (`n <= 3`, the rest unused), by
/// Gauss–Jordan elimination; `None` if it is singular.
pub fn invert(a: [[u8; SOLVE_MAX]; SOLVE_MAX], n: usize) -> Option<[[u8; SOLVE_MAX]; SOLVE_MAX]> {
    assert!((1..=SOLVE_MAX).contains(&n));
    let mut a = a;
    let mut out = [[0u8; SOLVE_MAX]; SOLVE_MAX];
    for (i, row) in out.iter_mut().enumerate().take(n) {
        row[i] = 1;
    }
    for col in 0..n {
        let pivot = (col..n).find(|&r| a[r][col] != 0)?;
        a.swap(col, pivot);
        out.swap(col, pivot);
        let scale = inv(a[col][col]);
        for j in 0..n {
            a[col][j] = mul(a[col][j], scale);
            out[col][j] = mul(out[col][j], scale);
        }
        for r in (0..n).filter(|&r| r != col) {
            let f = a[r][col];
            for j in 0..n {
                a[r][j] ^= mul(f, a[col][j]);
                out[r][j] ^= mul(f, out[col][j]);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Multiplication by shift-and-reduce, the definition, to check the
    /// tables against.
    fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut p = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= 0x1d;
            }
            b >>= 1;
        }
        p
    }

    #[test]
    fn tables_agree_with_the_definition() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a} * {b}");
            }
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1, "inverse of {a}");
            }
        }
        assert_eq!(pow(2, 8), 0x1d);
        assert_eq!(pow(4, 4), 0x1d);
        assert_eq!(pow(2, 255), 1);
    }

    #[test]
    fn lanes_multiply_each_byte_by_two() {
        let mut x: u64 = 0x0123_4567_89ab_cdef;
        for _ in 0..1000 {
            let got = mul2_lanes(x).to_le_bytes();
            for (g, b) in got.iter().zip(x.to_le_bytes()) {
                assert_eq!(*g, slow_mul(b, 2));
            }
            x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17);
        }
        assert_eq!(mul2_lanes(u64::MAX), u64::from_le_bytes([0xe3; 8]));
    }

    #[test]
    fn tables_multiply_slices() {
        let src: Vec<u8> = (0..=255).collect();
        for c in [0u8, 1, 2, 0x8e, 0xff] {
            let t = MulTable::new(c);
            let mut out = vec![7u8; 256];
            t.set(&mut out, &src);
            assert!(out.iter().zip(&src).all(|(o, s)| *o == mul(c, *s)));
            t.add(&mut out, &src);
            assert!(out.iter().all(|o| *o == 0));
        }
    }

    #[test]
    fn combine_sums_products() {
        let a: Vec<u8> = (0..=255).collect();
        let b: Vec<u8> = (0..=255).rev().collect();
        let c: Vec<u8> = (0..=255u8).map(|v| v.wrapping_mul(31)).collect();
        let (t0, t1, t2) = (MulTable::new(3), MulTable::new(1), MulTable::new(0xc2));
        let mut out = vec![0u8; 256];
        combine(&mut out, &[(&t0, &a), (&t1, &b), (&t2, &c)]);
        for i in 0..256 {
            assert_eq!(out[i], mul(3, a[i]) ^ b[i] ^ mul(0xc2, c[i]));
        }
        combine(&mut out, &[(&t0, &a), (&t2, &c)]);
        assert!((0..256).all(|i| out[i] == mul(3, a[i]) ^ mul(0xc2, c[i])));
    }

    #[test]
    fn inverts_vandermonde_and_refuses_singular() {
        let a = [[1, 1, 1], [4, 2, 1], [16, 4, 1]];
        let inv_a = invert(a, 3).unwrap();
        for (i, row) in a.iter().enumerate() {
            for j in 0..3 {
                let column = inv_a.map(|r| r[j]);
                let dot = row.iter().zip(column).fold(0, |acc, (x, y)| acc ^ mul(*x, y));
                assert_eq!(dot, u8::from(i == j));
            }
        }
        assert!(invert([[1, 1, 0], [1, 1, 0], [0, 0, 0]], 2).is_none());
        assert_eq!(invert([[5, 0, 0], [0, 0, 0], [0, 0, 0]], 1).unwrap()[0][0], inv(5));
    }
}
