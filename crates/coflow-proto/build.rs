//! Compiles `proto/coflow/v1/coflow.proto` with protox (a protobuf compiler written in Rust), so
//! the build needs no `protoc` installed, and generates prost messages and tonic stubs from it.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time, not baked in at compile time: a build script compiled in another
    // checkout (a copied target directory) must still read this checkout's proto.
    let root = format!("{}/../../proto", std::env::var("CARGO_MANIFEST_DIR")?);
    let file = "coflow/v1/coflow.proto";
    println!("cargo:rerun-if-changed={root}/{file}");
    let fds = protox::compile([file], [&root])?;
    // Every call decodes through `codec::BoundedCodec`, which checks a message's bounds on its
    // bytes before decoding it.
    tonic_prost_build::configure().codec_path("crate::codec::BoundedCodec").compile_fds(fds)?;
    Ok(())
}
