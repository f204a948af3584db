//! ARCHITECTURE.md kept true: the import graph of `src/` (outside `#[cfg(test)]` code) is
//! read from the source, and the test fails on a cycle between top-level modules, on a
//! cycle between the files of one module (a parent and its own children aside), and on any
//! import the layering table in ARCHITECTURE.md does not list. A new module needs a row.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// `a::{b, c::{d, e}}` as its full paths (`a::b`, `a::c::d`, `a::c::e`).
fn expand_use(tree: &str) -> Vec<String> {
    let mut out = Vec::new();
    expand_into("", tree, &mut out);
    out
}

fn expand_into(prefix: &str, tree: &str, out: &mut Vec<String>) {
    for part in split_top(tree).into_iter().map(str::trim).filter(|p| !p.is_empty()) {
        let join = |p: &str| if prefix.is_empty() { p.to_string() } else { format!("{prefix}::{p}") };
        match part.find('{') {
            Some(i) if part.ends_with('}') => {
                let head = part[..i].trim().trim_end_matches("::");
                expand_into(&join(head), &part[i + 1..part.len() - 1], out);
            }
            _ => out.push(join(part.split_whitespace().next().unwrap_or(part))),
        }
    }
}

/// The comma-separated parts of a use tree at its top level.
fn split_top(tree: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in tree.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&tree[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&tree[start..]);
    parts
}

/// `text` without comments and without `#[cfg(test)]` items (a `mod` or `fn` after the
/// attribute, to its closing brace).
fn strip(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() == "#[cfg(test)]" {
            let mut depth = 0i32;
            let mut opened = false;
            i += 1;
            while i < lines.len() {
                depth += lines[i].matches('{').count() as i32 - lines[i].matches('}').count() as i32;
                opened |= lines[i].contains('{');
                let ended = (opened && depth <= 0) || (!opened && lines[i].trim_end().ends_with(';'));
                i += 1;
                if ended {
                    break;
                }
            }
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

/// Every `crate::…` and `super::…` path `text` names, in `use` items and inline.
fn paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        rest = &rest[i + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(end) = rest.find(';') {
            found.extend(expand_use(&rest[..end]));
        }
    }
    for root in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(root) {
            let at = from + i;
            let before = text[..at].chars().last();
            let len =
                text[at..].find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(text.len() - at);
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                found.push(text[at..at + len].trim_end_matches(':').to_string());
            }
            from = at + len.max(1);
        }
    }
    found
}

/// Whether the file under `src/` is part of the layering: not the crate roots, not a file
/// of unit tests (`tests/`, `tests.rs`, `*_tests.rs`).
fn counts(rel: &str) -> bool {
    let test_only = rel.contains("tests/") || rel.ends_with("_tests.rs") || rel.ends_with("tests.rs");
    rel != "main.rs" && rel != "lib.rs" && !test_only
}

/// The module path of a file under `src/`: `pods/sync.rs` → [pods, sync], `pods/mod.rs` → [pods].
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel.trim_end_matches(".rs").split('/').map(String::from).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The module path `path` (as written in file `me`) points into, or `None` for paths
/// outside the crate.
fn target(me: &[String], path: &str) -> Option<Vec<String>> {
    let comps: Vec<&str> = path.split("::").filter(|c| !c.is_empty()).collect();
    let (base, rest): (Vec<String>, &[&str]) = match *comps.first()? {
        "crate" => (Vec::new(), &comps[1..]),
        "super" => {
            let ups = comps.iter().take_while(|c| **c == "super").count();
            (me[..me.len().saturating_sub(ups)].to_vec(), &comps[ups..])
        }
        _ => return None,
    };
    let mut t = base;
    t.extend(rest.iter().filter(|c| !matches!(**c, "*" | "self")).map(|c| c.to_string()));
    (!t.is_empty()).then_some(t)
}

/// The import graphs of `files` (path under `src/` → text), one per module that has
/// children, keyed by that module's path (`""` for the crate): an import from file `a::x::…`
/// of `a::y::…` is an edge `x → y` in the graph of `a`. A module importing its own parent
/// or child makes no edge.
fn graphs(files: &BTreeMap<String, String>) -> BTreeMap<String, Graph> {
    let mut all: BTreeMap<String, Graph> = BTreeMap::new();
    for (rel, text) in files {
        if !counts(rel) {
            continue;
        }
        let me = module_path(rel);
        for p in paths(&strip(text)) {
            let Some(t) = target(&me, &p) else { continue };
            let common = me.iter().zip(&t).take_while(|(a, b)| a == b).count();
            if common < me.len() && common < t.len() {
                let graph = all.entry(me[..common].join("::")).or_default();
                graph.entry(me[common].clone()).or_default().insert(t[common].clone());
            }
        }
    }
    all
}

/// The nodes of `g` that are on a cycle, each cycle as one sorted set (Tarjan's SCCs).
fn cycles(g: &Graph) -> Vec<BTreeSet<String>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        for w in t.g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w.as_str()) {
                visit(t, w);
                let lw = t.low[w.as_str()];
                t.low.insert(v, t.low[v].min(lw));
            } else if t.stack.contains(&w.as_str()) {
                let iw = t.index[w.as_str()];
                t.low.insert(v, t.low[v].min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                comp.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.found.push(comp);
            }
        }
    }
    let mut t = T { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.found
}

/// The layering table of ARCHITECTURE.md: module → the modules it may use (`None`: any,
/// for a row that says "everything"). A row is `| `module` … | `a`, `b` … |`; a module is
/// a top-level area (`node`) or one level down (`node::runtime`), whose uses name its
/// siblings (`cm`). Names in the second cell that are not modules (types, functions) are
/// ignored.
fn layering(doc: &str) -> BTreeMap<String, Option<BTreeSet<String>>> {
    let section = doc.split("\n## Layering").nth(1).unwrap_or_default();
    let section = section.split("\n## ").next().unwrap_or_default();
    let ticked = |cell: &str| -> Vec<String> { cell.split('`').skip(1).step_by(2).map(String::from).collect() };
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let (Some(first), Some(uses)) = (cells.first(), cells.get(1)) else { continue };
        let Some(module) = ticked(first).into_iter().next() else { continue };
        let allowed = if uses.contains("everything") { None } else { Some(ticked(uses).into_iter().collect()) };
        rows.insert(module, allowed);
    }
    rows
}

/// What breaks the rules: a cycle at any level, an area without a row, an import its row
/// (an area's, or a module's one level down where it has one) does not list.
fn violations(files: &BTreeMap<String, String>, doc: &str) -> Vec<String> {
    let graphs = graphs(files);
    let areas: BTreeSet<String> = files.keys().filter(|r| counts(r)).map(|r| module_path(r)[0].clone()).collect();
    let table = layering(doc);
    let mut bad = Vec::new();
    for (module, g) in &graphs {
        for c in cycles(g) {
            if module.is_empty() {
                bad.push(format!("a cycle between top-level modules: {c:?}"));
            } else {
                bad.push(format!("a cycle between the files of {module}: {c:?}"));
            }
        }
    }
    for a in areas.iter().filter(|a| !table.contains_key(*a)) {
        bad.push(format!("module {a} has no row in ARCHITECTURE.md's layering table"));
    }
    for (parent, g) in graphs.iter().filter(|(m, _)| !m.contains("::")) {
        for (from, uses) in g {
            let key = if parent.is_empty() { from.clone() } else { format!("{parent}::{from}") };
            let Some(Some(allowed)) = table.get(&key) else { continue };
            for used in uses.iter().filter(|u| !allowed.contains(*u)) {
                bad.push(format!("{key} uses {used}, which its row in ARCHITECTURE.md's layering table does not list"));
            }
        }
    }
    bad
}

fn read_src(dir: &Path, root: &Path, into: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            read_src(&path, root, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            into.insert(rel, std::fs::read_to_string(&path).unwrap());
        }
    }
}

#[test]
fn architecture_md_matches_the_import_graph_of_src() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = BTreeMap::new();
    read_src(&root.join("src"), &root.join("src"), &mut files);
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let bad = violations(&files, &doc);
    assert!(bad.is_empty(), "ARCHITECTURE.md and src/ disagree:\n{}", bad.join("\n"));
}

#[test]
fn a_deliberate_cycle_or_forbidden_import_is_caught() {
    let doc = "\n## Layering\n\n| module | uses |\n|---|---|\n| `a` | `b` |\n| `a::x` | `y` |\n| `b` | — |\n| `c` (x) | everything |\n";
    let files = |extra: &[(&str, &str)]| -> BTreeMap<String, String> {
        let mut f: BTreeMap<String, String> = [
            ("a/mod.rs", "pub mod x;\npub mod y;\nuse crate::b::{self, Thing};\n"),
            ("a/x.rs", "use super::y::Y;\n"),
            ("a/y.rs", "pub struct Y;\n#[cfg(test)]\nmod tests {\n    use crate::c::Z;\n}\n"),
            ("b.rs", "// use crate::a::x;\npub struct Thing;\n"),
            ("c.rs", "use crate::{a::x::X, b::Thing as T};\nfn f() { crate::a::y::g(); }\n"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in extra {
            f.insert(k.to_string(), v.to_string());
        }
        f
    };
    assert_eq!(violations(&files(&[]), doc), Vec::<String>::new());
    // b → a while a → b: a cycle, and an import b's row does not list.
    assert_eq!(
        violations(&files(&[("b.rs", "pub struct Thing;\nfn f() { let _ = crate::a::y::Y; }\n")]), doc),
        vec![
            r#"a cycle between top-level modules: {"a", "b"}"#,
            "b uses a, which its row in ARCHITECTURE.md's layering table does not list"
        ]
    );
    // y → x while x → y, inside module a.
    assert_eq!(
        violations(&files(&[("a/y.rs", "use super::x::{self as ex};\npub struct Y;\n")]), doc),
        vec![r#"a cycle between the files of a: {"x", "y"}"#]
    );
    // A new module without a row, which a uses though its row does not list it.
    assert_eq!(
        violations(&files(&[("a/x.rs", "use super::y::Y;\nuse crate::d;\n"), ("d.rs", "")]), doc),
        vec![
            "module d has no row in ARCHITECTURE.md's layering table",
            "a uses d, which its row in ARCHITECTURE.md's layering table does not list"
        ]
    );
    // One level down: a::x may use its sibling y, not a new sibling z.
    assert_eq!(
        violations(&files(&[("a/x.rs", "use super::y::Y;\nuse super::z::Z;\n"), ("a/z.rs", "pub struct Z;\n")]), doc),
        vec!["a::x uses z, which its row in ARCHITECTURE.md's layering table does not list"]
    );
}

#[test]
fn use_trees_expand_to_every_path() {
    assert_eq!(
        expand_use("crate::{api::{self, Pod}, util::Chain as C, wake}"),
        ["crate::api::self", "crate::api::Pod", "crate::util::Chain", "crate::wake"]
    );
}
