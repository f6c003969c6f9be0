//! Integration tests of the policies' library: the registry, the open fabric and the tidy checks.

mod fabric;
mod registry;
mod tidy;
