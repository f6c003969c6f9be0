//! Integration tests of coflow-proto: one test binary, one module per area.

mod msg;
