//! Links the unprefixed SQLite build of twinpage-sql (SQLite's own symbol
//! names) whole into the shared library and exports its `sqlite3_*` API.

fn main() {
    let dir = std::env::var("DEP_TWINPAGE_SQLITE3_STD_DIR")
        .expect("twinpage-sql exports the directory of its SQLite build");
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-lib=static:+whole-archive=twinpage_sqlite3_std");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let map = out.join("sqlite3.map");
    // Merged with rustc's own version script: SQLite's API becomes global.
    std::fs::write(&map, "{ global: sqlite3*; };\n").unwrap();
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsqlite3.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
