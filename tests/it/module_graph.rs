//! The module import graph stays free of loops where the architecture says it must.
//!
//! The test reads every `.rs` file under `src/` and builds a graph with one node per module
//! file (`src/a/b.rs` and `src/a/b/mod.rs` are both the module `a::b`; `src/lib.rs` is the
//! crate root, shown as `crate`; `src/main.rs` is the binary, another crate, and is left out).
//! `#[path = "..."]` on a `mod` declaration names the file it points to.
//!
//! An edge `a -> b` means a file of `a` names something in `b`, through:
//! - a `use` declaration (nested brace groups, `self`, `super::super`, `crate::`, renames with
//!   `as`, globs, `pub use`);
//! - a path in code starting with `crate::`, `super::` or `self::`
//!   (`crate::http::state::AppState`, `super::functions::aggr::eval(...)`), or with a name the
//!   file imported by `use` or a child module's name (`api::metadata::metadata` after
//!   `use super::api`).
//!
//! Each path goes to the longest prefix that is a module file: `crate::http::state::AppState` is
//! the module `http::state`. A name a module re-exports (`pub use`, including globs over a module
//! that defines the name) is followed to the module that defines it, so `use crate::http::AppState`
//! depends on `http::state`, not on `http` (the `mod.rs` hub). Not counted as dependencies:
//! - `mod x;` declarations (a parent declaring its children does not use them);
//! - a `pub use` of something inside the module's own subtree (a hub re-exporting its children:
//!   whoever uses the name is sent on to the defining module instead);
//! - a module naming itself;
//! - test code: items under `#[cfg(test)]` (inline `mod tests { ... }`, `#[cfg(test)] use ...`)
//!   and whole files declared `#[cfg(test)] mod x;` (test modules importing `super::*` are not
//!   architecture). Only the exact attribute `#[cfg(test)]` is recognized.
//!
//! Comments and string and char literals are skipped. Macro bodies are read as ordinary code.
//! Cycles are found with Tarjan's strongly connected components; each component is reported as
//! the shortest cycle through each of its modules (`a -> b -> c -> a`), without repeats.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::{Component, Path, PathBuf};

/// `a::b` as `["a", "b"]`; the crate root is empty.
type ModPath = Vec<String>;

/// A dependency graph: module -> modules it uses.
type Graph = BTreeMap<ModPath, BTreeSet<ModPath>>;

#[test]
fn http_modules_form_no_import_loop() {
    let cycles = cycles_within(&crate_graph(), "http");
    assert!(cycles.is_empty(), "import loops among the modules under src/http/:\n{}", show_cycles(&cycles));
}

#[test]
fn promql_functions_do_not_import_the_evaluator() {
    let graph = crate_graph();
    let eval = segments("promql::eval");
    assert!(graph.contains_key(&eval), "src/promql/eval.rs is not a module any more: update this test");
    let functions = segments("promql::functions");
    let loops: Vec<Vec<String>> = strongly_connected(&graph, &graph.keys().cloned().collect())
        .into_iter()
        .filter(|scc| scc.contains(&eval))
        .flat_map(|scc| {
            let members: BTreeSet<ModPath> = scc.iter().cloned().collect();
            scc.iter()
                .filter(|m| m.starts_with(&functions))
                .filter_map(|f| {
                    let there = shortest_path(&graph, &members, &eval, f)?;
                    let back = shortest_path(&graph, &members, f, &eval)?;
                    Some(there.iter().chain(&back[1..]).map(|m| name(m)).collect())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        loops.is_empty(),
        "modules under src/promql/functions/ and src/promql/eval.rs import each other in a loop:\n{}",
        show_cycles(&loops)
    );
}

/// Storage's bottom layers (`src/storage/mod.rs`): `format/` (the bytes of keys and rows) uses
/// nothing of storage but the root's errors and series ids, and `index/` (series ids, postings,
/// matchers) only those and `format/`. Neither may reach the writer, the readers, the lifecycle or
/// the shared state above them.
#[test]
fn storage_format_and_index_are_the_bottom_layers() {
    let graph = crate_graph();
    let roots = [segments("storage::error"), segments("storage::series_id")];
    let layers =
        [("storage::format", vec!["storage::format"]), ("storage::index", vec!["storage::index", "storage::format"])];
    let mut wrong = Vec::new();
    for (layer, allowed) in &layers {
        let layer = segments(layer);
        let allowed: Vec<ModPath> = allowed.iter().map(|a| segments(a)).collect();
        assert!(graph.keys().any(|m| m.starts_with(&layer)), "no module under {}: update this test", name(&layer));
        for (module, uses) in graph.iter().filter(|(m, _)| m.starts_with(&layer)) {
            for used in uses.iter().filter(|u| u.starts_with(&segments("storage"))) {
                if !roots.contains(used) && !allowed.iter().any(|a| used.starts_with(a)) {
                    wrong.push(format!("{} -> {}", name(module), name(used)));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "storage's bottom layers import from above them:\n{}", wrong.join("\n"));
    for group in ["storage::format", "storage::index"] {
        let cycles = cycles_within(&graph, group);
        assert!(cycles.is_empty(), "import loops under {group}:\n{}", show_cycles(&cycles));
    }
}

/// Not a check: prints every loop in the crate (`cargo test --test it module_graph -- --ignored
/// --nocapture`).
#[test]
#[ignore = "report only: prints the import loops of the whole crate"]
fn report_crate_wide_loops() {
    let cycles = cycles_within(&crate_graph(), "");
    println!("{} import loops in src/:\n{}", cycles.len(), show_cycles(&cycles));
}

#[test]
fn parser_reads_use_trees_and_inline_paths() {
    let facts = read_file(
        r#"
        //! use crate::not::this; (a comment)
        use super::{a, b::{c, d as e}, self as me};
        pub(crate) use super::super::f::G;
        use crate::h::*;
        use super::ingest::{self, Batch};
        fn run() {
            let s = "crate::in_a_string::x";
            let c = '{';
            crate::http::router::AppState::new();
            super::functions::aggr::eval(1);
            let v: Vec<u8> = std::vec::Vec::new();
            ingest::decode(&s, &'static_lifetime_free);
        }
        pub mod note { use super::k; }
        #[cfg(test)]
        mod tests {
            use super::*;
            use crate::only_tests::X;
        }
        "#,
    );
    let uses: Vec<(String, Option<String>, bool)> = facts
        .refs
        .iter()
        .filter_map(|r| match &r.kind {
            Kind::Use { public, name } => Some((r.path.join("::"), name.clone(), *public)),
            Kind::Inline => None,
        })
        .collect();
    let use_ = |path: &str, name: Option<&str>, public: bool| (path.to_owned(), name.map(str::to_owned), public);
    assert_eq!(
        uses,
        vec![
            use_("super::a", Some("a"), false),
            use_("super::b::c", Some("c"), false),
            use_("super::b::d", Some("e"), false),
            use_("super", Some("me"), false),
            use_("super::super::f::G", Some("G"), true),
            use_("crate::h", None, false),
            use_("super::ingest", Some("ingest"), false),
            use_("super::ingest::Batch", Some("Batch"), false),
            use_("super::k", Some("k"), false),
        ]
    );
    let inline: Vec<String> = facts
        .refs
        .iter()
        .filter(|r| matches!(r.kind, Kind::Inline))
        .map(|r| format!("{}{}", r.scope.iter().map(|s| format!("[{s}]")).collect::<String>(), r.path.join("::")))
        .collect();
    assert_eq!(
        inline,
        ["crate::http::router::AppState::new", "super::functions::aggr::eval", "std::vec::Vec::new", "ingest::decode"]
    );
    assert_eq!(facts.refs.last().map(|r| r.scope.clone()), Some(vec!["note".to_owned()]));
    assert!(facts.defines.contains("run") && facts.defines.contains("note"));

    // Resolution: `super::super` climbs two levels, re-exports lead to the defining module.
    let krate = Crate::from_files(vec![
        (PathBuf::from("lib.rs"), "pub mod x;".to_owned()),
        (PathBuf::from("x/mod.rs"), "pub mod y; pub mod state; pub use state::AppState;".to_owned()),
        (PathBuf::from("x/state.rs"), "pub struct AppState;".to_owned()),
        (PathBuf::from("x/y/mod.rs"), "pub mod z;".to_owned()),
        (PathBuf::from("x/y/z.rs"), "use super::super::AppState; fn f() { crate::x::y::g(); }".to_owned()),
    ]);
    let edges: Vec<String> = krate.graph()[&segments("x::y::z")].iter().map(|m| name(m)).collect();
    assert_eq!(edges, ["x::state", "x::y"]);
    assert!(krate.graph()[&segments("x")].is_empty(), "a hub's re-export of its child is no dependency");
}

// ---------------------------------------------------------------------------------------------
// Cycles

/// Every import loop among the modules strictly below `prefix` (`"http"`, `"promql::functions"`;
/// `""` for the whole crate, root included), as cycles of module names.
fn cycles_within(graph: &Graph, prefix: &str) -> Vec<Vec<String>> {
    let prefix = segments(prefix);
    let nodes: BTreeSet<ModPath> = graph
        .keys()
        .filter(|m| prefix.is_empty() || (m.len() > prefix.len() && m.starts_with(&prefix)))
        .cloned()
        .collect();
    let mut cycles = BTreeSet::new();
    for scc in strongly_connected(graph, &nodes) {
        let members: BTreeSet<ModPath> = scc.into_iter().collect();
        for m in &members {
            let Some(back) = members
                .iter()
                .filter(|next| graph[m].contains(*next))
                .filter_map(|next| shortest_path(graph, &members, next, m))
                .min_by_key(Vec::len)
            else {
                continue;
            };
            let mut cycle: Vec<String> = std::iter::once(m).chain(&back[..back.len() - 1]).map(|p| name(p)).collect();
            let start = (0..cycle.len()).min_by_key(|&i| &cycle[i]).unwrap_or(0);
            cycle.rotate_left(start);
            let first = cycle[0].clone();
            cycle.push(first);
            cycles.insert(cycle);
        }
    }
    cycles.into_iter().collect()
}

fn show_cycles(cycles: &[Vec<String>]) -> String {
    cycles.iter().map(|c| format!("  {}\n", c.join(" -> "))).collect()
}

/// Tarjan's strongly connected components of `graph` restricted to `nodes`, keeping only the
/// components that hold a loop (more than one module).
fn strongly_connected(graph: &Graph, nodes: &BTreeSet<ModPath>) -> Vec<Vec<ModPath>> {
    struct Tarjan<'a> {
        graph: &'a Graph,
        nodes: &'a BTreeSet<ModPath>,
        index: HashMap<&'a ModPath, usize>,
        low: HashMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: HashSet<&'a ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a ModPath) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph[v].iter().filter(|w| self.nodes.contains(*w)) {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.found.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        nodes,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: HashSet::new(),
        found: Vec::new(),
    };
    for v in nodes {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
}

/// Shortest path `from -> ... -> to` through `within` (both ends included), by breadth-first
/// search.
fn shortest_path(graph: &Graph, within: &BTreeSet<ModPath>, from: &ModPath, to: &ModPath) -> Option<Vec<ModPath>> {
    let mut came_from: HashMap<&ModPath, &ModPath> = HashMap::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = HashSet::from([from]);
    while let Some(v) = queue.pop_front() {
        if v == to {
            let mut path = vec![v.clone()];
            let mut at = v;
            while let Some(prev) = came_from.get(at) {
                path.push((*prev).clone());
                at = prev;
            }
            path.reverse();
            return Some(path);
        }
        for w in graph[v].iter().filter(|w| within.contains(*w)) {
            if seen.insert(w) {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    None
}

fn segments(path: &str) -> ModPath {
    path.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

fn name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_owned()
    } else {
        path.join("::")
    }
}

// ---------------------------------------------------------------------------------------------
// The crate

/// The graph of `src/`.
fn crate_graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect_rs(&src, &mut files);
    let files = files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("reading {}: {e}", f.display()));
            (f.strip_prefix(&src).expect("under src").to_path_buf(), text)
        })
        .filter(|(rel, _)| rel != Path::new("main.rs"))
        .collect();
    Crate::from_files(files).graph()
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

struct Module {
    facts: Facts,
    /// Test-only code (declared under `#[cfg(test)]`, or inside such a module).
    test: bool,
    /// Names the module's `use` declarations bind, to absolute paths.
    aliases: HashMap<String, Vec<String>>,
    /// The subset of `aliases` that is public (`pub use`): the module's re-exports.
    reexports: HashMap<String, Vec<String>>,
    /// Targets of `pub use path::*`.
    globs: Vec<Vec<String>>,
}

struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    /// `files`: paths relative to `src/` with their text.
    fn from_files(files: Vec<(PathBuf, String)>) -> Self {
        let mut parsed: Vec<(PathBuf, ModPath, Facts)> =
            files.into_iter().map(|(rel, text)| (rel.clone(), default_module(&rel), read_file(&text))).collect();
        // `#[path]` renames and `#[cfg(test)]` marks, from the declarations.
        let mut renamed: HashMap<PathBuf, ModPath> = HashMap::new();
        let mut test_modules: Vec<ModPath> = Vec::new();
        for (rel, module, facts) in &parsed {
            for decl in &facts.mods {
                let child = [module.clone(), vec![decl.name.clone()]].concat();
                if let Some(p) = &decl.path_attr {
                    let dir = rel.parent().unwrap_or(Path::new(""));
                    renamed.insert(normalize(&dir.join(p)), child.clone());
                }
                if decl.test {
                    test_modules.push(child);
                }
            }
        }
        for (rel, module, _) in &mut parsed {
            if let Some(m) = renamed.get(rel) {
                *module = m.clone();
            }
        }
        let mut modules: BTreeMap<ModPath, Module> = parsed
            .into_iter()
            .map(|(_, module, facts)| {
                let test = test_modules.iter().any(|t| module.starts_with(t));
                let m = Module { facts, test, aliases: HashMap::new(), reexports: HashMap::new(), globs: Vec::new() };
                (module, m)
            })
            .collect();
        // Aliases in two rounds: a `use` may start with a name another `use` of the file binds.
        let names: BTreeSet<ModPath> = modules.keys().cloned().collect();
        for path in names.iter() {
            for _round in 0..2 {
                let module = &modules[path];
                let mut aliases = module.aliases.clone();
                let mut reexports = HashMap::new();
                let mut globs = Vec::new();
                for r in &module.facts.refs {
                    let Kind::Use { public, name } = &r.kind else { continue };
                    let Some(abs) = absolute(&names, &aliases, path, &r.scope, &r.path) else { continue };
                    match name {
                        Some(n) if n != "_" => {
                            aliases.insert(n.clone(), abs.clone());
                            if *public {
                                reexports.insert(n.clone(), abs);
                            }
                        }
                        Some(_) => {}
                        None if *public => globs.push(abs),
                        None => {}
                    }
                }
                let module = modules.get_mut(path).expect("module");
                module.aliases = aliases;
                module.reexports = reexports;
                module.globs = globs;
            }
        }
        Self { modules }
    }

    fn is_module(&self, path: &[String]) -> bool {
        self.modules.contains_key(path)
    }

    /// The module defining what `abs` names: its longest prefix that is a module, following
    /// re-exports to where the name is defined.
    fn locate(&self, abs: &[String], depth: usize) -> ModPath {
        let k = (0..=abs.len()).rev().find(|&k| self.is_module(&abs[..k])).unwrap_or(0);
        let here = abs[..k].to_vec();
        if k == abs.len() || depth > 8 {
            return here;
        }
        let module = &self.modules[&here];
        let item = &abs[k];
        if module.facts.defines.contains(item) {
            return here;
        }
        if let Some(target) = module.reexports.get(item) {
            if target.as_slice() != &abs[..=k] {
                return self.locate(&[target.as_slice(), &abs[k + 1..]].concat(), depth + 1);
            }
        }
        for glob in &module.globs {
            let g = self.locate(glob, depth + 1);
            if g != here && self.is_module(glob) {
                let m = &self.modules[&g];
                if m.facts.defines.contains(item) || m.reexports.contains_key(item) {
                    return self.locate(&[g.as_slice(), &abs[k..]].concat(), depth + 1);
                }
            }
        }
        here
    }

    fn graph(&self) -> Graph {
        let names: BTreeSet<ModPath> = self.modules.keys().cloned().collect();
        let mut graph = Graph::new();
        for (path, module) in self.modules.iter().filter(|(_, m)| !m.test) {
            let edges = graph.entry(path.clone()).or_default();
            for r in &module.facts.refs {
                let Some(abs) = absolute(&names, &module.aliases, path, &r.scope, &r.path) else { continue };
                let target = self.locate(&abs, 0);
                let reexport_of_own_child = matches!(r.kind, Kind::Use { public: true, .. })
                    && target.len() > path.len()
                    && target.starts_with(path);
                if target != *path && !reexport_of_own_child && !self.modules[&target].test {
                    edges.insert(target);
                }
            }
        }
        graph
    }
}

/// The absolute path `path` names when written in module `module` (inside its inline modules
/// `scope`); `None` for another crate's path or a name that is no module nor imported.
fn absolute(
    modules: &BTreeSet<ModPath>,
    aliases: &HashMap<String, Vec<String>>,
    module: &[String],
    scope: &[String],
    path: &[String],
) -> Option<Vec<String>> {
    let base = [module, scope].concat();
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some([base.as_slice(), &path[1..]].concat()),
        "super" => {
            let mut at = base;
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                at.pop()?;
                rest = &rest[1..];
            }
            Some([at.as_slice(), rest].concat())
        }
        _ => {
            if let Some(a) = aliases.get(first) {
                return Some([a.as_slice(), &path[1..]].concat());
            }
            [base, module.to_vec()]
                .into_iter()
                .find(|b| modules.contains(&[b.as_slice(), &path[..1]].concat()))
                .map(|b| [b.as_slice(), path].concat())
        }
    }
}

/// `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` is the root.
fn default_module(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let file = parts.pop().unwrap_or_default();
    match file.as_str() {
        "mod.rs" => {}
        "lib.rs" if parts.is_empty() => {}
        _ => parts.push(file.trim_end_matches(".rs").to_owned()),
    }
    parts
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reading one file

/// What one file says about its dependencies.
#[derive(Default)]
struct Facts {
    refs: Vec<Reference>,
    mods: Vec<ModDecl>,
    /// Names of the items the file defines (`fn`, `struct`, `mod`, ...), for following globs.
    defines: HashSet<String>,
}

#[derive(Debug)]
struct Reference {
    /// As written: `["super", "ingest", "Batch"]`.
    path: Vec<String>,
    kind: Kind,
    /// The inline modules (`mod x { ... }`) it sits in.
    scope: Vec<String>,
}

#[derive(Debug)]
enum Kind {
    /// A leaf of a `use` tree; `name` is what it binds (`None` for a glob).
    Use { public: bool, name: Option<String> },
    /// A path in code.
    Inline,
}

struct ModDecl {
    name: String,
    path_attr: Option<String>,
    test: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
    /// A string (its text, escapes left as written), char or number literal.
    Lit(String),
}

fn lex(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let is_start = |ch: char| ch.is_alphabetic() || ch == '_';
    let is_cont = |ch: char| ch.is_alphanumeric() || ch == '_';
    // Index after the string whose opening quote is at `i`.
    let string_end = |mut i: usize| {
        i += 1;
        while i < c.len() && c[i] != '"' {
            i += if c[i] == '\\' { 2 } else { 1 };
        }
        i + 1
    };
    let mut toks = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            let end = string_end(i);
            toks.push(Tok::Lit(c[i + 1..(end - 1).min(c.len())].iter().collect()));
            i = end;
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                toks.push(Tok::Lit(String::new()));
            } else if at(i + 2) == '\'' {
                i += 3;
                toks.push(Tok::Lit(String::new()));
            } else {
                toks.push(Tok::Punct('\''));
                i += 1;
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && is_cont(c[i]) {
                i += 1;
            }
            toks.push(Tok::Lit(String::new()));
        } else if is_start(ch) {
            let start = i;
            while i < c.len() && is_cont(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let next = at(i);
            if matches!(word.as_str(), "r" | "br" | "cr") && (next == '"' || next == '#') {
                let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
                if at(i + hashes) == '"' {
                    let body = i + hashes + 1;
                    let mut j = body;
                    while j < c.len() && !(c[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#')) {
                        j += 1;
                    }
                    toks.push(Tok::Lit(c[body..j.min(c.len())].iter().collect()));
                    i = j + 1 + hashes;
                    continue;
                }
                if word == "r" && hashes == 1 && is_start(at(i + 1)) {
                    let start = i + 1;
                    i = start;
                    while i < c.len() && is_cont(c[i]) {
                        i += 1;
                    }
                    toks.push(Tok::Ident(c[start..i].iter().collect()));
                    continue;
                }
            }
            if matches!(word.as_str(), "b" | "c") && next == '"' {
                let end = string_end(i);
                toks.push(Tok::Lit(String::new()));
                i = end;
            } else if word == "b" && next == '\'' {
                i += if at(i + 1) == '\\' { 3 } else { 2 };
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                toks.push(Tok::Lit(String::new()));
            } else {
                toks.push(Tok::Ident(word));
            }
        } else if ch == ':' && at(i + 1) == ':' {
            toks.push(Tok::Sep);
            i += 2;
        } else {
            toks.push(Tok::Punct(ch));
            i += 1;
        }
    }
    toks
}

fn read_file(src: &str) -> Facts {
    Reader { toks: lex(src), t: 0, depth: 0, scopes: Vec::new(), facts: Facts::default() }.run()
}

struct Reader {
    toks: Vec<Tok>,
    t: usize,
    depth: usize,
    /// Open inline modules: name and the brace depth inside them.
    scopes: Vec<(String, usize)>,
    facts: Facts,
}

impl Reader {
    fn tok(&self, i: usize) -> Option<&Tok> {
        self.toks.get(i)
    }

    fn ident(&self, i: usize) -> Option<&str> {
        match self.toks.get(i) {
            Some(Tok::Ident(s)) => Some(s),
            _ => None,
        }
    }

    fn is(&self, i: usize, p: char) -> bool {
        self.toks.get(i) == Some(&Tok::Punct(p))
    }

    /// Index after the group opened at `i` (`(`, `[` or `{`), nesting counted.
    fn group_end(&self, i: usize) -> usize {
        let mut depth = 0usize;
        let mut j = i;
        while let Some(tok) = self.tok(j) {
            match tok {
                Tok::Punct('(' | '[' | '{') => depth += 1,
                Tok::Punct(')' | ']' | '}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return j + 1;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        j
    }

    fn scope(&self) -> Vec<String> {
        self.scopes.iter().map(|(s, _)| s.clone()).collect()
    }

    fn run(mut self) -> Facts {
        let mut cfg_test = false;
        let mut path_attr = None;
        while let Some(tok) = self.tok(self.t).cloned() {
            // Attributes: remembered for the item that follows.
            if tok == Tok::Punct('#') {
                let open = if self.is(self.t + 1, '!') { self.t + 2 } else { self.t + 1 };
                if self.is(open, '[') {
                    let end = self.group_end(open);
                    let inner = &self.toks[open + 1..end.saturating_sub(1).max(open + 1)];
                    let test = [Tok::Ident("cfg".into()), Tok::Punct('('), Tok::Ident("test".into()), Tok::Punct(')')];
                    if inner == test {
                        cfg_test = true;
                    }
                    if let [Tok::Ident(p), Tok::Punct('='), Tok::Lit(value)] = inner {
                        if p == "path" {
                            path_attr = Some(value.clone());
                        }
                    }
                    self.t = end;
                    continue;
                }
            }
            let attrs = (std::mem::take(&mut cfg_test), path_attr.take());
            let item = self.item_start(self.t);
            if attrs.0 {
                if self.ident(item) == Some("mod") && self.is(item + 2, ';') {
                    if let Some(name) = self.ident(item + 1) {
                        let decl = ModDecl { name: name.to_owned(), path_attr: attrs.1, test: true };
                        self.facts.mods.push(decl);
                    }
                }
                self.skip_item(item);
                continue;
            }
            match tok {
                Tok::Ident(word) => self.word(&word, item, attrs.1),
                Tok::Punct('{') => {
                    self.depth += 1;
                    self.t += 1;
                }
                Tok::Punct('}') => {
                    self.depth = self.depth.saturating_sub(1);
                    while self.scopes.last().is_some_and(|(_, d)| *d > self.depth) {
                        self.scopes.pop();
                    }
                    self.t += 1;
                }
                _ => self.t += 1,
            }
        }
        self.facts
    }

    /// The index of the item keyword after a visibility at `i` (`pub`, `pub(crate)`).
    fn item_start(&self, i: usize) -> usize {
        if self.ident(i) != Some("pub") {
            return i;
        }
        if self.is(i + 1, '(') {
            self.group_end(i + 1)
        } else {
            i + 1
        }
    }

    /// Skips the item at `i`: up to its `;` or past its `{ ... }` body.
    fn skip_item(&mut self, i: usize) {
        let mut j = i;
        while let Some(tok) = self.tok(j) {
            match tok {
                Tok::Punct(';') => {
                    self.t = j + 1;
                    return;
                }
                Tok::Punct('{') => {
                    self.t = self.group_end(j);
                    return;
                }
                Tok::Punct('(' | '[') => j = self.group_end(j),
                _ => j += 1,
            }
        }
        self.t = j;
    }

    fn word(&mut self, word: &str, item: usize, path_attr: Option<String>) {
        let t = self.t;
        let after_sep = t > 0 && self.tok(t - 1) == Some(&Tok::Sep);
        if self.ident(item) == Some("use") {
            let public = item != t;
            let mut leaves = Vec::new();
            let mut i = item + 1;
            self.use_tree(&mut i, Vec::new(), &mut leaves);
            let scope = self.scope();
            for (path, name) in leaves {
                self.facts.refs.push(Reference { path, kind: Kind::Use { public, name }, scope: scope.clone() });
            }
            while self.tok(i).is_some() && !self.is(i, ';') {
                i += 1;
            }
            self.t = i + 1;
            return;
        }
        if self.ident(item) == Some("mod") {
            if let Some(name) = self.ident(item + 1).map(str::to_owned) {
                self.facts.defines.insert(name.clone());
                if self.is(item + 2, ';') {
                    self.facts.mods.push(ModDecl { name, path_attr, test: false });
                    self.t = item + 3;
                    return;
                }
                if self.is(item + 2, '{') {
                    self.depth += 1;
                    self.scopes.push((name, self.depth));
                    self.t = item + 3;
                    return;
                }
            }
        }
        if item != t {
            // A visibility (`pub(in crate::x)` names no dependency): on to the item.
            self.t = item;
            return;
        }
        if matches!(word, "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "union") {
            if let Some(name) = self.ident(t + 1) {
                self.facts.defines.insert(name.to_owned());
            }
        }
        if word == "macro_rules" && self.is(t + 1, '!') {
            if let Some(name) = self.ident(t + 2) {
                self.facts.defines.insert(name.to_owned());
            }
        }
        if !after_sep && self.tok(t + 1) == Some(&Tok::Sep) {
            let mut path = vec![word.to_owned()];
            let mut i = t + 1;
            while self.tok(i) == Some(&Tok::Sep) {
                match self.ident(i + 1) {
                    Some(s) => path.push(s.to_owned()),
                    None => break,
                }
                i += 2;
            }
            if path.len() > 1 {
                self.facts.refs.push(Reference { path, kind: Kind::Inline, scope: self.scope() });
            }
            self.t = i;
            return;
        }
        self.t += 1;
    }

    /// One use tree from `*i`, its leaves appended to `out` as (path, bound name).
    fn use_tree(&self, i: &mut usize, mut path: Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
        if self.tok(*i) == Some(&Tok::Sep) {
            *i += 1;
        }
        loop {
            match self.tok(*i) {
                Some(Tok::Ident(s)) => {
                    path.push(s.clone());
                    *i += 1;
                    if self.tok(*i) == Some(&Tok::Sep) {
                        *i += 1;
                        continue;
                    }
                    break;
                }
                Some(Tok::Punct('*')) => {
                    *i += 1;
                    out.push((path, None));
                    return;
                }
                Some(Tok::Punct('{')) => {
                    *i += 1;
                    while self.tok(*i).is_some() && !self.is(*i, '}') {
                        self.use_tree(i, path.clone(), out);
                        if self.is(*i, ',') {
                            *i += 1;
                        }
                    }
                    *i += 1;
                    return;
                }
                _ => return,
            }
        }
        if path.len() > 1 && path.last().is_some_and(|s| s == "self") {
            path.pop();
        }
        let mut name = path.last().cloned();
        if self.ident(*i) == Some("as") {
            name = self.ident(*i + 1).map(str::to_owned);
            *i += 2;
        }
        out.push((path, name));
    }
}
