//! Keeps the layer order of the crate's top doc comment: every top-level
//! module imports (`crate::<module>`) only modules below it, outside test
//! code. Reads `src/` as text; a failure names the file and the import.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Bottom to top, as in `src/lib.rs` and the README's Repository section.
const LAYERS: &[&str] = &[
    "error",
    "types",
    "config",
    "lake",
    "sink",
    "schema",
    "batch",
    "decode",
    "source",
    "commit",
    "schema_commands",
    "snapshot",
    "table",
    "forget",
    "status",
    "http",
    "pipeline",
];

/// `text` without comments and without the items under `#[cfg(test)]`,
/// and the names of the `mod NAME;` declared under it (test-only files).
fn production_code(text: &str) -> (String, BTreeSet<String>) {
    let mut code = String::new();
    for line in text.lines() {
        // Comments, doc comments included, never import.
        let line = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    let mut out = String::new();
    let mut test_mods = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        // The item ends at its `;` (a declaration) or at the brace that
        // closes its first block, whichever comes first.
        let semi = item.find(';');
        let brace = item.find('{');
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (i, c) in item[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, None) => item.len(),
        };
        let declared = item[..end].trim();
        if let Some(name) = declared
            .strip_prefix("mod ")
            .or_else(|| declared.strip_prefix("pub mod "))
            .or_else(|| declared.strip_prefix("pub(crate) mod "))
            .and_then(|d| d.strip_suffix(';'))
        {
            test_mods.insert(name.trim().to_string());
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    (out, test_mods)
}

/// The `.rs` files of a module (its file, or its folder), without those
/// that only tests declare.
fn module_files(src: &Path, module: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let file = src.join(format!("{module}.rs"));
    let mut skip: BTreeSet<PathBuf> = BTreeSet::new();
    let mut todo = vec![];
    if file.is_file() {
        todo.push(file);
    }
    let dir = src.join(module);
    if dir.is_dir() {
        let mut dirs = vec![dir];
        while let Some(d) = dirs.pop() {
            for entry in fs::read_dir(&d).unwrap() {
                let p = entry.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|e| e == "rs") {
                    todo.push(p);
                }
            }
        }
    }
    todo.sort();
    for path in &todo {
        let (_, test_mods) = production_code(&fs::read_to_string(path).unwrap());
        // `mod x;` in a/b.rs or a/b/mod.rs names a/b/x.rs or a/b/x/.
        let parent = match path.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs") | Some("lib.rs") => path.parent().unwrap().to_path_buf(),
            _ => path.with_extension(""),
        };
        for m in test_mods {
            skip.insert(parent.join(format!("{m}.rs")));
            skip.insert(parent.join(&m));
        }
    }
    for path in todo {
        if !skip.iter().any(|s| path.starts_with(s)) {
            out.push(path);
        }
    }
    out
}

/// Every import that runs upward or sideways: `(file, import)`.
fn upward_imports(src: &Path) -> Vec<(String, String)> {
    let re = regex::Regex::new(r"crate::([a-z_]+)").unwrap();
    let mut out = Vec::new();
    for (rank, module) in LAYERS.iter().enumerate() {
        for path in module_files(src, module) {
            let (code, _) = production_code(&fs::read_to_string(&path).unwrap());
            for c in re.captures_iter(&code) {
                let target = &c[1];
                let Some(target_rank) = LAYERS.iter().position(|l| *l == target) else {
                    continue;
                };
                if target_rank >= rank && target != *module {
                    let file = path.strip_prefix(src.parent().unwrap()).unwrap();
                    out.push((file.display().to_string(), format!("crate::{target}")));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The files of the Delta implementation of the table format: only they
/// (and `table/format.rs`, the interface) reach the Delta log module.
const DELTA_FILES: &[&str] = &[
    "table/format.rs",
    "table/log/",
    "table/cleanup.rs",
    "table/redact.rs",
    "table/tombstones.rs",
];

/// Every production use of the Delta log module (`log::…`, `table::log`)
/// outside [`DELTA_FILES`]: `(file, use)`.
fn format_bypasses(src: &Path) -> Vec<(String, String)> {
    let re = regex::Regex::new(r"(?:\btable::log\b|\bsuper::log\b|(?:^|[^:\w])log::[A-Za-z_]+)")
        .unwrap();
    let mut out = Vec::new();
    for path in module_files(src, "") {
        let rel = path.strip_prefix(src).unwrap().display().to_string();
        if DELTA_FILES.iter().any(|d| rel.starts_with(d)) {
            continue;
        }
        let (code, _) = production_code(&fs::read_to_string(&path).unwrap());
        for m in re.find_iter(&code) {
            let found = m
                .as_str()
                .trim_start_matches(|c: char| !c.is_alphanumeric());
            out.push((format!("src/{rel}"), found.to_string()));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `(file, import)` pairs one per line, for a failure message.
fn listed(found: &[(String, String)]) -> String {
    found
        .iter()
        .map(|(file, import)| format!("  {file}: {import}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_module_imports_only_modules_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Every top-level module has its place in the order.
    for entry in fs::read_dir(&src).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let module = name.strip_suffix(".rs").unwrap_or(&name);
        if !["lib", "main", "layers"].contains(&module) {
            assert!(
                LAYERS.contains(&module),
                "src/{name}: a top-level module with no place in the layer order (src/layers.rs, src/lib.rs)"
            );
        }
    }
    let upward = upward_imports(&src);
    assert!(
        upward.is_empty(),
        "imports that run up the layer order ({}):\n{}",
        LAYERS.join(" → "),
        listed(&upward)
    );
}

#[test]
fn only_the_table_format_reaches_the_delta_log() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bypasses = format_bypasses(&src);
    assert!(
        bypasses.is_empty(),
        "uses of the Delta log that bypass table::format (TableFormat):\n{}",
        listed(&bypasses)
    );
}

#[test]
fn the_format_check_sees_a_bypass_and_ignores_tracing_and_tests() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("table/log")).unwrap();
    fs::write(src.join("table/log/mod.rs"), "pub fn load() {}\n").unwrap();
    fs::write(
        src.join("table/format.rs"),
        "use super::log;\nfn f() { log::load() }\n",
    )
    .unwrap();
    fs::write(
        src.join("table/fold.rs"),
        "use super::log::{self, TableState};\nfn g() { tracing::log::info!(); }\n\
         #[cfg(test)]\nmod tests { fn t() { crate::table::log::load() } }\n",
    )
    .unwrap();
    fs::write(
        src.join("forget.rs"),
        "fn h() { crate::table::log::load() }\n",
    )
    .unwrap();
    assert_eq!(
        format_bypasses(&src),
        vec![
            ("src/forget.rs".to_string(), "table::log".to_string()),
            ("src/table/fold.rs".to_string(), "super::log".to_string()),
        ]
    );
}

#[test]
fn the_check_sees_an_upward_import_and_ignores_test_code() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("config")).unwrap();
    fs::write(
        src.join("config/mod.rs"),
        "use crate::error::Result;\n// crate::pipeline in a comment\n\
         #[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod more {\n    use crate::table::X;\n}\n",
    )
    .unwrap();
    fs::write(src.join("config/tests.rs"), "use crate::pipeline::run;\n").unwrap();
    fs::write(
        src.join("config/defaults.rs"),
        "const A: u64 = crate::table::B;\n",
    )
    .unwrap();
    fs::write(src.join("error.rs"), "use crate::sink::explain;\n").unwrap();
    assert_eq!(
        upward_imports(&src),
        vec![
            (
                "src/config/defaults.rs".to_string(),
                "crate::table".to_string()
            ),
            ("src/error.rs".to_string(), "crate::sink".to_string()),
        ]
    );
}
