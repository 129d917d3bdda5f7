//! Records the compiler version (`rustc -V`) for the report's machine description.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if let Ok(out) = Command::new(rustc).arg("-V").output() {
        if out.status.success() {
            let v = String::from_utf8_lossy(&out.stdout);
            println!("cargo:rustc-env=PHYLLO_RUSTC_VERSION={}", v.trim());
        }
    }
}
