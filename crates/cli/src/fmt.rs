//! Output helpers: human-readable sizes the way zfs prints them, and tables.

/// 1536 → "1.50K", 0 → "0"; binary units as zfs uses.
pub fn size(v: u64) -> String {
    const UNITS: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    let mut f = v as f64;
    let mut u = 0;
    while f >= 1024.0 && u < UNITS.len() - 1 {
        f /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{}", v)
    } else if f < 10.0 {
        format!("{:.2}{}", f, UNITS[u])
    } else if f < 100.0 {
        format!("{:.1}{}", f, UNITS[u])
    } else {
        format!("{:.0}{}", f, UNITS[u])
    }
}

/// Seconds as `HH:MM:SS` (hours past 99 as they are).
pub fn hms(secs: u64) -> String {
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Rows as aligned columns (or tab-separated without a header for -H),
/// one line each, ready to print.
pub fn table(header: &[&str], rows: &[Vec<String>], scripted: bool) -> String {
    let mut out = String::new();
    if scripted {
        for r in rows {
            out.push_str(&r.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(c.chars().count());
            }
        }
    }
    let mut line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i].saturating_sub(c.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            // Names and words left-aligned, figures right-aligned, as zfs list does.
            let numeric = c.chars().next().is_some_and(|ch| ch.is_ascii_digit() || ch == '-');
            if i == 0 || !numeric {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
    out
}

/// A table whose header is the chosen column names, upper-cased (`-o`).
pub fn columns(fields: &[String], rows: &[Vec<String>], scripted: bool) -> String {
    let header: Vec<String> = fields.iter().map(|f| f.to_uppercase()).collect();
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    table(&hdr, rows, scripted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size(0), "0");
        assert_eq!(size(1023), "1023");
        assert_eq!(size(1536), "1.50K");
        assert_eq!(size(15 << 30), "15.0G");
        assert_eq!(size(200 << 20), "200M");
    }
}
