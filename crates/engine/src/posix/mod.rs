//! The POSIX layer (OpenZFS's ZPL): files, directories, links and
//! attributes on top of an object set. It returns errors and knows no FUSE;
//! [`api`] is the contract with the layer that serves it.
//!
//! (Work in progress for issue 3: the implementation lands here.)

pub mod api;

pub use api::*;
