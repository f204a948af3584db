//! Generates Rust code for the .proto files in proto/: protoc (vendored from crates.io)
//! writes a descriptor set, protobuf-codegen 2.28 makes the messages, grpcio-compiler the
//! services. Output goes to OUT_DIR and is included by `src/proto.rs`.

use protobuf::Message;
use std::path::{Path, PathBuf};

const PROTOS: &[&str] = &["health", "deviceplugin", "cri"];

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("vendored protoc for this platform");
    for name in PROTOS {
        let file = format!("proto/{name}.proto");
        println!("cargo:rerun-if-changed={file}");
        let set_path = out.join(format!("{name}.desc"));
        let status = std::process::Command::new(&protoc)
            .args(["--include_imports", "-Iproto"])
            .arg(format!("--descriptor_set_out={}", set_path.display()))
            .arg(&file)
            .status()
            .expect("run protoc");
        assert!(status.success(), "protoc failed on {file}");
        let bytes = std::fs::read(&set_path).expect("read descriptor set");
        let set = protobuf::descriptor::FileDescriptorSet::parse_from_bytes(&bytes).expect("parse descriptor set");
        let files = set.get_file().to_vec();
        let targets = vec![format!("{name}.proto")];
        let dir = out.join(name);
        std::fs::create_dir_all(&dir).expect("create out dir");
        // Lite: no descriptors or reflection (nothing here uses them), a much smaller binary.
        let lite = protobuf_codegen::Customize { lite_runtime: Some(true), ..Default::default() };
        protobuf_codegen::gen_and_write(&files, &targets, &dir, &lite).expect("generate messages");
        for r in grpcio_compiler::codegen::gen(&files, &targets) {
            std::fs::write(dir.join(&r.name), r.content).expect("write service code");
        }
        // include! rejects inner attributes and inner doc comments: strip them (the
        // including module carries the allow attributes).
        for entry in std::fs::read_dir(&dir).expect("list generated files").flatten() {
            strip_inner_attributes(&entry.path());
        }
    }
}

fn strip_inner_attributes(path: &Path) {
    let text = std::fs::read_to_string(path).expect("read generated file");
    let kept: Vec<&str> =
        text.lines().filter(|l| !l.trim_start().starts_with("#![") && !l.trim_start().starts_with("//!")).collect();
    std::fs::write(path, kept.join("\n")).expect("write generated file");
}
