//! The generated code in `src/proto/` is what the generator makes of the .proto files in
//! `proto/`: protoc (vendored from crates.io) parses them, protobuf-codegen 3 writes the
//! messages (`<name>.rs`, lite runtime), grpcio-compiler the services (`<name>_grpc.rs`).
//! `make proto` writes the files (this test with `FERROLET_PROTO_WRITE=1`).

use protobuf2::Message as _;
use std::path::Path;

const PROTOS: &[&str] = &["health", "deviceplugin", "cri"];

/// The generated files for `proto/<name>.proto`: (file name, text).
fn generate(root: &Path, name: &str) -> Vec<(String, String)> {
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("vendored protoc for this platform");
    let out = tempfile::tempdir().unwrap();
    let file = root.join(format!("proto/{name}.proto"));
    // Lite: no descriptors or reflection (nothing here uses them), a much smaller binary.
    // Accessors (`set_x`, `mut_x`, `x()`) beside the public fields: the API protobuf 2's
    // generated code had, which the users of the messages are written against.
    protobuf_codegen::Codegen::new()
        .protoc()
        .protoc_path(&protoc)
        .include(root.join("proto"))
        .input(&file)
        .customize(protobuf_codegen::Customize::default().lite_runtime(true).gen_mod_rs(false).generate_accessors(true))
        .out_dir(out.path())
        .run()
        .expect("generate messages");
    let messages = std::fs::read_to_string(out.path().join(format!("{name}.rs"))).unwrap();

    let set_path = out.path().join("set.desc");
    let status = std::process::Command::new(&protoc)
        .arg("--include_imports")
        .arg(format!("-I{}", root.join("proto").display()))
        .arg(format!("--descriptor_set_out={}", set_path.display()))
        .arg(&file)
        .status()
        .expect("run protoc");
    assert!(status.success(), "protoc failed on {}", file.display());
    let set = protobuf2::descriptor::FileDescriptorSet::parse_from_bytes(&std::fs::read(&set_path).unwrap()).unwrap();
    let services = grpcio_compiler::codegen::gen(set.get_file(), &[format!("{name}.proto")]);
    let [service] = &services[..] else { panic!("grpcio-compiler made {} files for {name}", services.len()) };

    vec![
        (format!("{name}.rs"), included(&messages)),
        (format!("{name}_grpc.rs"), included(std::str::from_utf8(&service.content).unwrap())),
    ]
}

/// `text` without its inner attributes and inner doc comments, which `include!` rejects
/// (the including module in `src/proto.rs` carries the allow attributes).
fn included(text: &str) -> String {
    let kept: Vec<&str> =
        text.lines().filter(|l| !l.trim_start().starts_with("#![") && !l.trim_start().starts_with("//!")).collect();
    kept.join("\n") + "\n"
}

#[test]
fn checked_in_code_is_what_the_generator_makes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let write = std::env::var_os("FERROLET_PROTO_WRITE").is_some();
    let mut stale = Vec::new();
    for name in PROTOS {
        for (file, text) in generate(root, name) {
            let path = root.join("src/proto").join(&file);
            if write {
                std::fs::write(&path, &text).unwrap();
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                stale.push(path.display().to_string());
            }
        }
    }
    assert!(stale.is_empty(), "generated code differs from proto/ (run `make proto`): {}", stale.join(", "));
}
