//! The crate's floors: every module uses only modules declared above it in `lib.rs`
//! (read from the code's own `crate::` references, names that `lib.rs` re-exports
//! resolved to their modules, a folder module counted as one), so no two modules call
//! each other and the `mod` list reads as the floor plan, ground first.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// The source of a module without its comments and its `mod tests`.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The first segment of every path that starts at `crate::`, including each item of a
/// `use crate::{...}` group.
fn crate_references(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group, up to its closing brace.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphabetic() || c == '_') => {
                        found.push(identifier(&group[i..]).to_string());
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.push(identifier(rest).to_string());
        }
    }
    found
}

#[test]
fn every_module_uses_only_modules_declared_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = code_of(&fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));

    // The floor plan: modules in the order lib.rs declares them.
    let mut order: Vec<String> = Vec::new();
    for line in lib.lines() {
        let line = line.trim();
        let declared = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "));
        if let Some(name) = declared.and_then(|rest| rest.strip_suffix(';')) {
            if !order.iter().any(|known| known == name) {
                order.push(name.to_string());
            }
        }
    }
    assert!(order.len() > 10, "modules read from lib.rs: {order:?}");

    // Names lib.rs re-exports, by the module that defines them.
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    for (at, _) in lib.match_indices("pub use self::") {
        let rest = &lib[at + "pub use self::".len()..];
        let module = identifier(rest);
        let items = &rest[module.len()..rest.find(';').expect("a `;`")];
        for name in items.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !name.is_empty() {
                reexported.insert(name.to_string(), module.to_string());
            }
        }
    }

    let mut wrong = Vec::new();
    for (floor, module) in order.iter().enumerate() {
        let file = src.join(format!("{module}.rs"));
        let code = if file.exists() {
            code_of(&fs::read_to_string(&file).expect("a module"))
        } else {
            // A folder module: all its files are one module.
            let folder = src.join(module);
            let mut all = String::new();
            for entry in fs::read_dir(&folder).expect("a module's folder") {
                let path = entry.expect("an entry").path();
                all.push_str(&code_of(&fs::read_to_string(path).expect("a file")));
                all.push('\n');
            }
            all
        };
        for name in crate_references(&code) {
            let used = if order.contains(&name) {
                name.clone()
            } else if let Some(module) = reexported.get(&name) {
                module.clone()
            } else {
                continue;
            };
            let used_floor = order.iter().position(|m| *m == used).expect("declared");
            if used_floor >= floor && used != *module {
                wrong.push(format!("{module} uses {used} (as crate::{name})"));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "modules that use a module declared at or after them in lib.rs: {wrong:#?}"
    );
}
