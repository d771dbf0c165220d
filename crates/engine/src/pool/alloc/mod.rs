//! Space allocation: free-space sets ([`range_tree`]), the metaslab
//! allocator ([`metaslab`]) and the on-disk space log and checkpoint encoding
//! ([`spacelog`]).

pub mod metaslab;
pub mod range_tree;
pub mod spacelog;
