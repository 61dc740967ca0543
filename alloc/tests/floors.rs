//! The crate's floors: `lib.rs` declares its layers (the folders `mechanism/`,
//! `policy/`, `figures/`, `work/`) and its top files ground first, and each layer's
//! `mod.rs` declares its files ground first. Read in that order, every module uses only
//! modules declared above it (read from the code's own `crate::` references, names that
//! `lib.rs` re-exports resolved to their modules, a folder inside a layer counted as one
//! module), but for the few uses in [`RUNS_UP`], each named with why: so no two modules
//! call each other and the `mod` lists read as the floor plan, ground first.

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

/// The uses that run up, each as (module, the module declared after it that it uses,
/// why): where a layer uses one above it. Any other use that runs up fails the test, and so
/// does an entry here that no longer holds.
const RUNS_UP: &[(&str, &str, &str)] = &[
    (
        "purge",
        "tally",
        "purges skipped and waited for count in the running totals",
    ),
    (
        "phase_peak",
        "route",
        "the phase arenas it bounds are the route's `PHASE_ARENAS`",
    ),
    (
        "report",
        "arena",
        "`Report::measure` takes the `Arena`s it measures",
    ),
];

/// The modules a file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`), in order,
/// each once (a module declared under two `cfg`s counts once).
fn declared(code: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in code.lines() {
        let line = line.trim();
        let line = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        if let Some(name) = line
            .strip_prefix("mod ")
            .and_then(|rest| rest.strip_suffix(';'))
        {
            if !names.iter().any(|known| known == name) {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// The top-level items of a `{...}` group that `text` starts after, up to its closing
/// brace.
fn group_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(text[start..i].trim());
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// The names a path that starts after `crate::` reaches first, past any layer: `work::arena`
/// gives `arena`, `{Arena, work::{arena, scope}}` gives `Arena`, `arena` and `scope`.
fn first_names(path: &str, layers: &[String], found: &mut Vec<String>) {
    let path = path.trim_start();
    if let Some(group) = path.strip_prefix('{') {
        for item in group_items(group) {
            first_names(item, layers, found);
        }
        return;
    }
    let name = identifier(path);
    if name.is_empty() {
        return;
    }
    match path[name.len()..].strip_prefix("::") {
        Some(rest) if layers.iter().any(|layer| layer == name) => first_names(rest, layers, found),
        _ => found.push(name.to_string()),
    }
}

/// Every name that a path starting at `crate::` reaches first, past any layer.
fn crate_references(code: &str, layers: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        first_names(&code[at + "crate::".len()..], layers, &mut found);
    }
    found
}

/// The code of all the `.rs` files under `folder`, its subfolders included.
fn code_of_folder(folder: &Path) -> String {
    let mut all = String::new();
    let mut entries: Vec<_> = fs::read_dir(folder)
        .expect("a module's folder")
        .map(|entry| entry.expect("an entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            all.push_str(&code_of_folder(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            all.push_str(&code_of(&fs::read_to_string(&path).expect("a file")));
            all.push('\n');
        }
    }
    all
}

/// The code of module `name` in `folder`: `name.rs`, or the folder `name/` as one.
fn module_code(folder: &Path, name: &str) -> String {
    let file = folder.join(format!("{name}.rs"));
    if file.exists() {
        code_of(&fs::read_to_string(&file).expect("a module"))
    } else {
        code_of_folder(&folder.join(name))
    }
}

#[test]
fn every_module_uses_only_modules_declared_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = code_of(&fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));

    // The floor plan: the modules in the order lib.rs declares them, with their code;
    // in place of each layer (a folder), its modules in the order its `mod.rs` declares
    // them.
    let mut layers: Vec<String> = Vec::new();
    let mut order: Vec<(String, String)> = Vec::new();
    for name in declared(&lib) {
        if src.join(format!("{name}.rs")).exists() {
            let code = module_code(&src, &name);
            order.push((name, code));
            continue;
        }
        let folder = src.join(&name);
        let plan = code_of(&fs::read_to_string(folder.join("mod.rs")).expect("a layer's mod.rs"));
        for module in declared(&plan) {
            let code = module_code(&folder, &module);
            order.push((module, code));
        }
        layers.push(name);
    }
    let names: Vec<&str> = order.iter().map(|(name, _)| name.as_str()).collect();
    assert!(names.len() > 10, "modules read from lib.rs: {names:?}");
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        names.len(),
        "a module name used twice: {names:?}"
    );

    // Names lib.rs re-exports, by the module that defines them: the last segment of
    // the path before them (`pub use self::work::arena::{live_arenas, Arena};`).
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    for (at, _) in lib.match_indices("pub use self::") {
        let rest = &lib[at + "pub use self::".len()..];
        let statement = &rest[..rest.find(';').expect("a `;`")];
        let mut module = "";
        let mut items = statement;
        while let Some(after) = items[identifier(items).len()..].strip_prefix("::") {
            module = identifier(items);
            items = after;
        }
        for name in items.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !name.is_empty() && !names.contains(&name) {
                reexported.insert(name.to_string(), module.to_string());
            }
        }
    }

    let mut wrong = Vec::new();
    let mut runs_up = Vec::new();
    for (floor, (module, code)) in order.iter().enumerate() {
        for name in crate_references(code, &layers) {
            let used = if names.contains(&name.as_str()) {
                name.clone()
            } else if let Some(module) = reexported.get(&name) {
                module.clone()
            } else {
                continue;
            };
            let used_floor = names.iter().position(|m| *m == used).expect("declared");
            if used_floor < floor || used == *module {
                continue;
            }
            if RUNS_UP
                .iter()
                .any(|(from, to, _)| from == module && *to == used)
            {
                runs_up.push((module.clone(), used.clone()));
            } else {
                wrong.push(format!("{module} uses {used} (as crate::{name})"));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "modules that use a module declared at or after them: {wrong:#?}"
    );
    for (from, to, why) in RUNS_UP {
        assert!(
            runs_up.iter().any(|(f, t)| f == from && t == to),
            "{from} no longer uses {to} ({why}): remove it from RUNS_UP"
        );
    }
}
