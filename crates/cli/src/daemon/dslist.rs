//! `tarn list` and `tarn get` in the daemon: datasets and their properties
//! as `zfs list` and `zfs get` print them.
//!
//! Order: hierarchical — a file system, then its snapshots oldest first,
//! then its children by name (the dataset layer's `list` order); `-s PROP`
//! re-sorts stably by one property. Sizes are human-readable (`fmt::size`)
//! unless `-p`; `-H` prints tab-separated rows without a header.
//!
//! `mounted` is the daemon's, not the dataset layer's: `yes` when the
//! dataset can be reached now — on a mount of its own, inside its parent's
//! mount (opened there or not yet), or, for a snapshot, open under
//! `.zfs/snapshot` or mounted with `tarn mount SNAP DIR` (`mounts::Reach`).
//!
//! Cost: `list -o name` asks the dataset layer for names only (no property
//! is computed), so listing 40,000 datasets reads their records once; any
//! other column computes every property of every dataset listed. `get` of
//! named properties on named datasets is O(1) in the number of datasets.

use clap::Args;
use serde::{Deserialize, Serialize};
use tarn_engine::dataset::{DatasetInfo, DatasetKind, PropValue, Source, Types};
use tarn_engine::{tunables::parse_size, Error, Result};

use super::datasets::{datasets_of, dsl_of};
use super::mounts::Reach;
use super::state::{Out, State};
use crate::cache::Cache;
use crate::fmt;

#[derive(Debug, Args, Serialize, Deserialize)]
pub struct ListArgs {
    /// Also list every descendant
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Descend at most this many levels (snapshots count as one level below their file system); implies -r
    #[arg(short = 'd', value_name = "DEPTH")]
    pub depth: Option<usize>,
    /// filesystem, snapshot or all (comma-separated)
    #[arg(short = 't', value_name = "TYPE", value_delimiter = ',')]
    pub types: Vec<String>,
    /// Columns: name,used,avail,refer,mountpoint or any property
    #[arg(short = 'o', value_name = "FIELDS", value_delimiter = ',')]
    pub fields: Vec<String>,
    /// Scripted: no header, tab-separated
    #[arg(short = 'H')]
    pub scripted: bool,
    /// Exact numbers
    #[arg(short = 'p')]
    pub parsable: bool,
    /// Sort by this property (ascending)
    #[arg(short = 's', value_name = "PROP")]
    pub sort: Option<String>,
    /// Every property of each dataset, as JSON
    #[arg(long)]
    pub json: bool,
    pub datasets: Vec<String>,
}

#[derive(Debug, Args, Serialize, Deserialize)]
pub struct GetArgs {
    /// Also every descendant (file systems and snapshots)
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Scripted: no header, tab-separated
    #[arg(short = 'H')]
    pub scripted: bool,
    /// Exact numbers
    #[arg(short = 'p')]
    pub parsable: bool,
    /// Columns from name,property,value,source
    #[arg(short = 'o', value_name = "FIELDS", value_delimiter = ',')]
    pub fields: Vec<String>,
    /// all, or PROP[,PROP]...
    pub props: String,
    #[arg(required = true)]
    pub datasets: Vec<String>,
}

/// The property a column or property name stands for (zfs's short names).
fn canonical(name: &str) -> &str {
    match name {
        "avail" => "available",
        "refer" => "referenced",
        "usedsnap" => "usedbysnapshots",
        "usedds" => "usedbydataset",
        "usedchild" => "usedbychildren",
        "ratio" => "compressratio",
        "refratio" => "refcompressratio",
        "compress" => "compression",
        "rdonly" => "readonly",
        "recsize" => "recordsize",
        other => other,
    }
}

const SIZE_PROPS: &[&str] = &["used", "available", "referenced", "written", "usedbysnapshots", "usedbydataset", "usedbychildren", "quota", "reservation"];

/// A value as printed: sizes human-readable unless `parsable`, creation as a date.
fn shown(prop: &str, value: &str, parsable: bool) -> String {
    match value.parse::<u64>() {
        Ok(n) if !parsable && SIZE_PROPS.contains(&prop) => fmt::size(n),
        Ok(n) if !parsable && prop == "creation" => super::utc(n).replace('T', " ").trim_end_matches('Z').to_string(),
        // As `zfs get -p`: no quota or reservation is 0.
        Err(_) if parsable && value == "none" && ["quota", "reservation"].contains(&prop) => "0".to_string(),
        Err(_) if parsable && ["recordsize", "quota", "reservation"].contains(&prop) => parse_size(value).map_or(value.to_string(), |n| n.to_string()),
        _ => value.to_string(),
    }
}

fn bad_property(p: &str) -> Error {
    Error::invalid(format!("bad property list: invalid property '{}'", p))
}

/// Hierarchical order by file-system components; stable, so each file
/// system's snapshots stay after it, oldest first.
fn sort_hierarchically<T>(v: &mut [T], name: impl Fn(&T) -> &str) {
    let fs = |n: &str| n.split('@').next().unwrap_or(n).to_string();
    v.sort_by(|a, b| fs(name(a)).split('/').cmp(fs(name(b)).split('/')));
}

/// How many levels `name` is below `root` (a snapshot is one below its file system).
fn depth_below(name: &str, root: &str) -> usize {
    let levels = |n: &str| n.matches('/').count() + usize::from(n.contains('@'));
    levels(name).saturating_sub(levels(root))
}

fn types_of(a: &ListArgs) -> Result<Types> {
    if a.types.is_empty() {
        return Ok(Types::FILESYSTEMS);
    }
    let mut t = Types { filesystems: false, snapshots: false };
    for ty in &a.types {
        match ty.as_str() {
            "filesystem" | "fs" => t.filesystems = true,
            "snapshot" | "snap" => t.snapshots = true,
            "all" => t = Types::ALL,
            other => return Err(Error::invalid(format!("invalid type '{}': filesystem, snapshot or all", other))),
        }
    }
    Ok(t)
}

/// The datasets named, or every pool's root (sorted) if none.
fn roots(st: &mut State, named: &[String], out: &mut Out) -> Result<(Vec<String>, bool)> {
    if !named.is_empty() {
        return Ok((named.to_vec(), false));
    }
    let mut pools: Vec<String> = Cache::load()?.pools.into_iter().map(|p| p.name).collect();
    pools.sort();
    let mut live = Vec::new();
    for p in pools {
        match st.live(&p, out) {
            Ok(_) => live.push(p),
            Err(e) => out.warnings.push(e.msg),
        }
    }
    Ok((live, true))
}

pub fn list(st: &mut State, a: ListArgs, out: &mut Out) -> Result<()> {
    let types = types_of(&a)?;
    let fields: Vec<String> = if a.fields.is_empty() { ["name", "used", "avail", "refer", "mountpoint"].map(String::from).to_vec() } else { a.fields.clone() };
    let (roots, all) = roots(st, &a.datasets, out)?;
    let recursive = a.recursive || a.depth.is_some() || all;
    let names_only = fields.iter().all(|f| f == "name") && a.sort.is_none() && !a.json;
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut infos: Vec<DatasetInfo> = Vec::new();
    for root in &roots {
        let ds = datasets_of(st, root, out)?;
        let cannot = |e: Error| Error::new(e.kind, format!("cannot open '{}': {}", root, if e.msg.contains("does not exist") { "dataset does not exist" } else { &e.msg }));
        let within = |n: &str| a.depth.is_none_or(|d| depth_below(n, root) <= d);
        if names_only {
            let mut names = ds.names(root, recursive, types).map_err(cannot)?;
            names.retain(|n| within(n));
            sort_hierarchically(&mut names, |n| n.as_str());
            rows.extend(names.into_iter().map(|n| vec![n; fields.len()]));
        } else {
            let mut got = ds.list(root, recursive, types).map_err(cannot)?;
            got.retain(|i| within(&i.name));
            sort_hierarchically(&mut got, |i| i.name.as_str());
            infos.extend(got);
        }
    }
    if a.json || fields.iter().any(|f| f == "mounted") || a.sort.as_deref() == Some("mounted") {
        let reach = Reach::new(st);
        for i in &mut infos {
            i.props.push(("mounted".to_string(), mounted(&reach, &i.name)));
        }
    }
    if let Some(p) = &a.sort {
        let p = canonical(p);
        let key = |i: &DatasetInfo| if p == "name" { Some(i.name.clone()) } else { i.prop(p).map(|v| v.value.clone()) };
        if infos.first().is_some_and(|i| key(i).is_none()) {
            return Err(bad_property(p));
        }
        infos.sort_by(|x, y| match (key(x), key(y)) {
            (Some(a), Some(b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(m), Ok(n)) => m.cmp(&n),
                _ => a.cmp(&b),
            },
            _ => std::cmp::Ordering::Equal,
        });
    }
    if a.json {
        out.line(serde_json::to_string_pretty(&infos).map_err(|e| Error::invalid(e.to_string()))?);
        return Ok(());
    }
    for i in &infos {
        rows.push(fields.iter().map(|f| column(i, f, a.parsable)).collect::<Result<_>>()?);
    }
    out.text.push_str(&fmt::columns(&fields, &rows, a.scripted));
    Ok(())
}

/// The `mounted` property (see the module comment).
fn mounted(reach: &Reach, name: &str) -> PropValue {
    PropValue { value: if reach.path(name).is_some() { "yes" } else { "no" }.to_string(), source: Source::None }
}

fn column(i: &DatasetInfo, field: &str, parsable: bool) -> Result<String> {
    let p = canonical(field);
    if p == "name" {
        return Ok(i.name.clone());
    }
    if p == "type" {
        return Ok(if i.kind == DatasetKind::Snapshot { "snapshot" } else { "filesystem" }.into());
    }
    let v = i.prop(p).ok_or_else(|| bad_property(field))?;
    Ok(shown(p, &v.value, parsable))
}

pub fn get(st: &mut State, a: GetArgs, out: &mut Out) -> Result<()> {
    let fields = if a.fields.is_empty() { ["name", "property", "value", "source"].map(String::from).to_vec() } else { a.fields.clone() };
    if let Some(f) = fields.iter().find(|f| !["name", "property", "value", "source"].contains(&f.as_str())) {
        return Err(Error::invalid(format!("invalid column '{}': name, property, value or source", f)));
    }
    let mut rows = Vec::new();
    for root in &a.datasets {
        let ds = dsl_of(st, root, out)?;
        let cannot = |e: Error| Error::new(e.kind, format!("cannot open '{}': {}", root, if e.msg.contains("does not exist") { "dataset does not exist" } else { &e.msg }));
        let mut targets = if a.recursive { ds.names(root, true, Types::ALL).map_err(cannot)? } else { vec![root.clone()] };
        sort_hierarchically(&mut targets, |n| n.as_str());
        let reach = Reach::new(st);
        for t in &targets {
            let props = if a.props == "all" {
                let mut v = ds.get_all(t).map_err(cannot)?;
                v.push(("mounted".to_string(), PropValue { value: String::new(), source: Source::None }));
                v
            } else {
                let mut v = Vec::new();
                for p in a.props.split(',').map(canonical) {
                    let value = if p == "mounted" {
                        ds.get(t, "type").map_err(cannot)?
                    } else {
                        ds.get(t, p).map_err(|e| if e.msg.contains("unknown property") { bad_property(p) } else { cannot(e) })?
                    };
                    v.push((p.to_string(), value));
                }
                v
            };
            let props: Vec<(String, PropValue)> = props.into_iter().map(|(p, v)| if p == "mounted" { (p, mounted(&reach, t)) } else { (p, v) }).collect();
            for (p, v) in props {
                let cell = |f: &String| match f.as_str() {
                    "name" => t.clone(),
                    "property" => p.clone(),
                    "value" => shown(&p, &v.value, a.parsable),
                    _ => v.source.to_string(),
                };
                rows.push(fields.iter().map(cell).collect());
            }
        }
    }
    out.text.push_str(&fmt::columns(&fields, &rows, a.scripted));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hierarchical_order_keeps_snapshots_after_their_file_system() {
        let mut v = vec!["t", "t/b", "t/a", "t/a@s1", "t/a@s0", "t/a/x", "t/a-b"].into_iter().map(String::from).collect::<Vec<_>>();
        sort_hierarchically(&mut v, |n| n.as_str());
        assert_eq!(v, ["t", "t/a", "t/a@s1", "t/a@s0", "t/a/x", "t/a-b", "t/b"]);
    }

    #[test]
    fn depths_and_values() {
        assert_eq!(depth_below("t/a/b", "t"), 2);
        assert_eq!(depth_below("t/a@s", "t/a"), 1);
        assert_eq!(shown("used", "1536", false), "1.50K");
        assert_eq!(shown("used", "1536", true), "1536");
        assert_eq!(shown("recordsize", "128K", true), "131072");
        assert_eq!(shown("compression", "lz4", false), "lz4");
    }
}
