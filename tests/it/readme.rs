//! Every shell block in the docs keeps working when pasted.
//!
//! `README.md` and every page under `docs/` are read as they are, and every ```` ```sh ```` block
//! in them must carry a marker on the line right before its fence, `<!-- sh-check: KIND -->`,
//! naming the kind of check that covers it ([`KINDS`]); `every_shell_block_in_the_docs_is_checked`
//! fails on a block without one, on an unknown kind, on a marker without its block, and on shell
//! blocks fenced as `bash`, `shell` or `console` (so none escapes the rule). The kinds:
//!
//! - `quick-tour` and `ingest`: run with `sh -eu` and the real `curl` against a fresh server with
//!   default flags (the documented address `127.0.0.1:9201` replaced by its own), their output
//!   checked; `saltdb inspect` prints the window the tour wrote.
//! - `run`: any other block that talks to a server: run the same way, it must exit 0.
//! - `serve`: lines that start a long-running server (`cargo run --release -- serve ...`,
//!   `saltdb serve ...`, with environment assignments before them): the built binary is started
//!   with the same flags and environment in a temp directory (only `--listen` made `127.0.0.1:0`
//!   and `--data-dir` moved into the temp directory), must answer `/-/healthy` and stop cleanly;
//!   a `cargo test` line must be the test command `.ci/run` runs.
//! - `clickhouse`: the two-shard walkthrough, run for real (`clickhouse-server` needed).
//! - `clickhouse-replicated`: the walkthrough of two shards of two replicas and a ZooKeeper, run
//!   for real (`clickhouse-server` and `zookeeper` needed); a replica is killed and the node
//!   still writes and answers.
//! - `grafana`: the paths and variables it sets are checked against `dashboards/` (and the
//!   commented Docker variant against them); Grafana itself is started only when `grafana` is on
//!   PATH, because Debian does not package it and CI cannot install it.
//!
//! The same test keeps the README a front door (under 250 lines, the two commands at the top)
//! and checks that every relative link of every page points to an existing file and heading,
//! and that every page under `docs/` is listed in `docs/README.md` and in the README. Every
//! Prometheus configuration shown (remote write and read, scraping, federation) passes
//! `promtool check config`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

const README_ADDR: &str = "127.0.0.1:9201";

/// The kinds of check a shell block can be marked with (see the module documentation).
const KINDS: &[&str] = &["quick-tour", "ingest", "run", "serve", "clickhouse", "clickhouse-replicated", "grafana"];

const MARKER_OPEN: &str = "<!-- sh-check:";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One Markdown page: its path relative to the repository and its text.
struct Page {
    path: PathBuf,
    text: String,
}

/// `README.md`, then every `docs/*.md` page in name order.
fn pages() -> Vec<Page> {
    let mut paths = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("read docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root().join(&path)).unwrap_or_else(|e| panic!("read {path:?}: {e}"));
            Page { path, text }
        })
        .collect()
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("read README.md")
}

/// A fenced code block.
struct Block {
    /// `path:line` of the opening fence.
    at: String,
    /// The first word of the fence's info string (`sh`, `yaml`, empty, ...).
    lang: String,
    /// The kind its `<!-- sh-check: KIND -->` marker names, if the line before the fence is one.
    kind: Option<String>,
    /// The lines between the fences, each ending in a newline.
    body: String,
}

/// A marker line's kind: `<!-- sh-check: serve -->` gives `serve`.
fn marker_kind(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix(MARKER_OPEN)?;
    Some(rest.strip_suffix("-->").unwrap_or(rest).trim().to_owned())
}

/// Every fenced block of `page`, and the markers that precede no code fence (`path:line`).
fn fenced_blocks(page: &Page) -> (Vec<Block>, Vec<String>) {
    let mut blocks = Vec::new();
    let mut orphans = Vec::new();
    let mut pending: Option<(String, usize)> = None;
    let mut lines = page.text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(kind) = marker_kind(trimmed) {
            if let Some((_, at)) = pending.replace((kind, i + 1)) {
                orphans.push(format!("{}:{at}", page.path.display()));
            }
            continue;
        }
        if let Some(info) = trimmed.strip_prefix("```") {
            let mut body = String::new();
            for (_, inner) in lines.by_ref() {
                if inner.trim() == "```" {
                    break;
                }
                body.push_str(inner);
                body.push('\n');
            }
            blocks.push(Block {
                at: format!("{}:{}", page.path.display(), i + 1),
                lang: info.split_whitespace().next().unwrap_or("").to_owned(),
                kind: pending.take().map(|(kind, _)| kind),
                body,
            });
            continue;
        }
        if !trimmed.is_empty() {
            if let Some((_, at)) = pending.take() {
                orphans.push(format!("{}:{at}", page.path.display()));
            }
        }
    }
    if let Some((_, at)) = pending {
        orphans.push(format!("{}:{at}", page.path.display()));
    }
    (blocks, orphans)
}

fn all_blocks() -> Vec<Block> {
    pages().iter().flat_map(|p| fenced_blocks(p).0).collect()
}

/// Every `sh` block marked with `kind`.
fn sh_blocks(kind: &str) -> Vec<Block> {
    all_blocks().into_iter().filter(|b| b.lang == "sh" && b.kind.as_deref() == Some(kind)).collect()
}

/// The one `sh` block marked with `kind`.
fn the_sh_block(kind: &str) -> Block {
    let mut blocks = sh_blocks(kind);
    assert_eq!(blocks.len(), 1, "expected exactly one shell block marked `{kind}` in README.md and docs/");
    blocks.pop().unwrap()
}

/// The body of the first code block fenced with ```` ```<lang> ```` after the line `heading`.
fn block_after(text: &str, heading: &str, lang: &str) -> String {
    let rest = &text[text.find(heading).unwrap_or_else(|| panic!("README has no {heading:?}"))..];
    let open = format!("```{lang}\n");
    let start = rest.find(&open).unwrap_or_else(|| panic!("no ```{lang} block after {heading:?}")) + open.len();
    let len = rest[start..].find("\n```").expect("unterminated code block");
    rest[start..start + len + 1].to_owned()
}

fn on_path(bin: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {bin}")]).output().is_ok_and(|o| o.status.success())
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of `text`'s headings (outside code blocks), numbered as GitHub numbers repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let n = seen.entry(base.clone()).or_insert(0);
            out.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
            *n += 1;
        }
    }
    out
}

/// The targets of the Markdown links `[text](target)` of `text`, outside code blocks and code
/// spans, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let link = regex::Regex::new(r"\[[^\]]*\]\(([^)\s]+)\)").unwrap();
    let code_span = regex::Regex::new(r"`[^`]*`").unwrap();
    let mut out = Vec::new();
    let mut in_code = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // `[`docs/format.md`](format.md)`: the link text may be code, the target never is.
        let line = code_span.replace_all(line, |c: &regex::Captures| {
            if c.get(0).unwrap().end() < line.len() && line[c.get(0).unwrap().end()..].starts_with("](") {
                "code".to_owned()
            } else {
                String::new()
            }
        });
        for c in link.captures_iter(&line) {
            out.push((i + 1, c[1].to_owned()));
        }
    }
    out
}

/// Problems with the relative links of `page`: a missing file, or a missing heading anchor.
fn link_problems(page: &Page) -> Vec<String> {
    let mut bad = Vec::new();
    let dir = root().join(page.path.parent().unwrap_or(Path::new("")));
    for (line, target) in links(&page.text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let at = format!("{}:{line}: {target}", page.path.display());
        let (file, anchor) = match target.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (target.as_str(), None),
        };
        let text = if file.is_empty() {
            page.text.clone()
        } else if dir.join(file).exists() {
            std::fs::read_to_string(dir.join(file)).unwrap_or_default()
        } else {
            bad.push(format!("{at}: no such file"));
            continue;
        };
        if let Some(anchor) = anchor {
            if !anchors(&text).contains(anchor) {
                bad.push(format!("{at}: no heading with this anchor"));
            }
        }
    }
    bad
}

/// The exhaustive check: every shell block of every page is marked with a known kind of check,
/// the README stays a front door, and every relative link resolves.
#[test]
fn every_shell_block_in_the_docs_is_checked() {
    let pages = pages();
    let mut bad = Vec::new();
    let mut per_kind: BTreeMap<String, usize> = KINDS.iter().map(|k| ((*k).to_owned(), 0)).collect();
    for page in &pages {
        let (blocks, orphans) = fenced_blocks(page);
        for at in orphans {
            bad.push(format!("{at}: a sh-check marker must be on the line right before a ```sh fence"));
        }
        for block in blocks {
            match (block.lang.as_str(), block.kind.as_deref()) {
                ("bash" | "shell" | "console" | "zsh" | "shell-session", _) => {
                    bad.push(format!("{}: fence shell blocks as ```sh (with a sh-check marker)", block.at))
                }
                ("sh", None) => bad.push(format!(
                    "{}: shell block without a `<!-- sh-check: KIND -->` marker (kinds: {})",
                    block.at,
                    KINDS.join(", ")
                )),
                ("sh", Some(kind)) if !KINDS.contains(&kind) => {
                    bad.push(format!("{}: unknown sh-check kind {kind:?} (kinds: {})", block.at, KINDS.join(", ")))
                }
                ("sh", Some(kind)) => *per_kind.get_mut(kind).unwrap() += 1,
                (_, Some(kind)) => bad.push(format!("{}: a sh-check marker ({kind}) on a non-sh block", block.at)),
                _ => {}
            }
        }
        bad.extend(link_problems(page));
    }
    for (kind, n) in &per_kind {
        eprintln!("readme: {n} shell block(s) of kind {kind}");
    }
    for kind in ["quick-tour", "ingest", "clickhouse", "grafana"] {
        if per_kind[kind] != 1 {
            bad.push(format!("expected one shell block of kind {kind}, found {}", per_kind[kind]));
        }
    }

    // The README is the front door: short, and the two commands first.
    let readme = readme();
    let lines = readme.lines().count();
    if lines >= 250 {
        bad.push(format!("README.md has {lines} lines; keep it under 250 and move the rest to docs/"));
    }
    let first = fenced_blocks(&pages[0]).0.into_iter().find(|b| b.lang == "sh");
    let commands: Vec<String> =
        first.iter().flat_map(|b| command_lines(&b.body)).map(|l| shell_words(&l).join(" ")).collect();
    if commands != ["cargo run --release -- serve", "cargo test"] {
        bad.push(format!("README.md's first shell block must be the serve and test commands, is {commands:?}"));
    }

    // Every page is findable from both tables of contents.
    let index = &pages.iter().find(|p| p.path == Path::new("docs/README.md")).expect("docs/README.md").text;
    for page in pages.iter().skip(1).filter(|p| p.path != Path::new("docs/README.md")) {
        let name = page.path.file_name().unwrap().to_string_lossy();
        if !index.contains(&format!("]({name})")) {
            bad.push(format!("docs/README.md does not list {name}"));
        }
        if !readme.contains(&format!("](docs/{name})")) {
            bad.push(format!("README.md's \"Where to read more\" does not list docs/{name}"));
        }
        let mut head = page.text.lines();
        let (title, blank, first) = (head.next().unwrap_or(""), head.next(), head.next().unwrap_or(""));
        if !title.starts_with("# ")
            || blank != Some("")
            || first.is_empty()
            || first.starts_with(['#', '|', '`', '<', '-'])
        {
            bad.push(format!("{}: a page starts with its title, then a sentence saying what it answers", name));
        }
    }
    assert!(bad.is_empty(), "the docs' shell blocks and links:\n{}", bad.join("\n"));
}

/// The check of links must see what it claims to.
#[test]
fn readme_link_check_catches_broken_links() {
    let page = Page {
        path: PathBuf::from("docs/x.md"),
        text: "# X\n\nSee [a](format.md#keyspaces), [b](nope.md), [c](format.md#nope), [d](#x), [e](#y),\n\
               `[f](code.md)` and [`g`](../README.md#quick-tour).\n\n```\n[h](in-code.md)\n```\n"
            .into(),
    };
    let problems = link_problems(&page).join("\n");
    assert!(problems.contains("nope.md: no such file"), "{problems}");
    assert!(problems.contains("format.md#nope: no heading"), "{problems}");
    assert!(problems.contains("#y: no heading"), "{problems}");
    assert_eq!(problems.lines().count(), 3, "{problems}");
    assert_eq!(slug("JSON lines: values and native histograms"), "json-lines-values-and-native-histograms");
    assert_eq!(slug("Manifest (`meta`)"), "manifest-meta");
}

/// Runs `script` with `sh -eu` after replacing the documented address by `addr`, with the built
/// `saltdb` first on PATH.
fn run_against(script: &str, addr: &str) -> (String, String) {
    let script = script.replace(README_ADDR, addr);
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_saltdb")).parent().unwrap().display().to_string();
    let path = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let out = Command::new("sh")
        .args(["-eu", "-c", &script])
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .expect("run sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "the block failed ({:?}):\n{stdout}\n{stderr}\nscript:\n{script}", out.status);
    (stdout, stderr)
}

#[test]
fn readme_quick_tour_works_against_a_fresh_server() {
    let test = "readme::readme_quick_tour_works_against_a_fresh_server";
    if !on_path("curl") {
        crate::skip::skip(test, "curl is not on PATH", "apt-get install curl");
        return;
    }
    let block = the_sh_block("quick-tour");
    let tour = block.body;
    assert_eq!(tour, block_after(&readme(), "## Quick tour", "sh"), "the quick tour's block moved ({})", block.at);
    assert!(tour.contains(README_ADDR), "the quick tour no longer talks to {README_ADDR}:\n{tour}");
    let tmp = tempfile::tempdir().unwrap();
    // Default flags, as `cargo run --release -- serve` has them (30-day retention included).
    let bin = Binary::spawn(&tmp.path().join("data"), &[]);
    let before_s = chrono::Utc::now().timestamp();
    let (stdout, stderr) = run_against(&tour, &bin.addr.to_string());
    let after_s = chrono::Utc::now().timestamp();
    let answers: Vec<Value> = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("the tour printed something that is not JSON ({e}):\n{stdout}"));
    let [export, instant, range] = answers.as_slice() else {
        panic!("expected an export line and two query answers, got:\n{stdout}\n{stderr}");
    };

    // The export returns exactly the two imported samples, stamped 15 s apart, the newest now.
    assert_eq!(export["metric"], serde_json::json!({"__name__": "cpu", "host": "a"}), "{stdout}");
    assert_eq!(export["values"], serde_json::json!([1.5, 2.0]), "{stdout}");
    let ts: Vec<i64> = export["timestamps"].as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect();
    assert_eq!(ts.len(), 2, "{stdout}");
    assert_eq!(ts[1] - ts[0], 15_000, "{stdout}");
    assert!((before_s * 1000..=after_s * 1000).contains(&ts[1]), "newest sample {} not stamped now", ts[1]);

    // The instant query answers the latest sample; the range query both, on its 15 s grid.
    assert_eq!(instant["status"], "success", "{stdout}");
    assert_eq!(instant["data"]["resultType"], "vector", "{stdout}");
    let result = instant["data"]["result"].as_array().unwrap();
    assert_eq!(result.len(), 1, "{stdout}");
    assert_eq!(result[0]["metric"], export["metric"]);
    assert_eq!(result[0]["value"][1], "2", "{stdout}");
    assert_eq!(range["status"], "success", "{stdout}");
    let series = range["data"]["result"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{stdout}");
    let values: Vec<&str> = series[0]["values"].as_array().unwrap().iter().map(|p| p[1].as_str().unwrap()).collect();
    assert!(values.contains(&"1.5") && values.last() == Some(&"2"), "range answer {values:?}");

    // `saltdb inspect` (docs/api.md, `/api/v1/status/windows`) shows the window the tour wrote.
    let inspect = Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["inspect", "--url", &bin.url("")])
        .output()
        .expect("run saltdb inspect");
    let table = String::from_utf8_lossy(&inspect.stdout);
    assert!(inspect.status.success(), "{table}{}", String::from_utf8_lossy(&inspect.stderr));
    // One series, and its two samples (still in the head, so counted exactly).
    let hot: Vec<&str> = table.lines().filter(|l| l.contains(" hot ")).collect();
    assert!(!hot.is_empty(), "no hot window:\n{table}");
    // Columns: start (2 words), end (2), state, keeps, series, samples, ...
    assert!(hot.iter().all(|row| row.split_whitespace().nth(5) == Some("raw")), "a raw window:\n{table}");
    assert!(hot.iter().all(|row| row.split_whitespace().nth(6) == Some("1")), "one series per window:\n{table}");
    let samples: u64 =
        hot.iter().filter_map(|row| row.split_whitespace().nth(7)?.replace(',', "").parse::<u64>().ok()).sum();
    assert_eq!(samples, 2, "the tour's two samples:\n{table}");
    bin.terminate();
}

#[test]
fn readme_ingest_lines_work_against_a_fresh_server() {
    let test = "readme::readme_ingest_lines_work_against_a_fresh_server";
    if !on_path("curl") {
        crate::skip::skip(test, "curl is not on PATH", "apt-get install curl");
        return;
    }
    let block = the_sh_block("ingest").body;
    let tmp = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(&tmp.path().join("data"), &[]);
    let (stdout, _) = run_against(&block, &bin.addr.to_string());
    // The OpenTSDB details answer, then the query.
    let answers: Vec<Value> =
        serde_json::Deserializer::from_str(&stdout).into_iter::<Value>().collect::<Result<_, _>>().unwrap();
    let [put, query] = answers.as_slice() else { panic!("expected two JSON answers:\n{stdout}") };
    assert_eq!(put["success"], 1, "{stdout}");
    let mut names: Vec<String> = query["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metric"]["__name__"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["cpu_usage", "http_requests_total", "mem_free", "sys.cpu.nice"], "{stdout}");
    bin.terminate();
}

/// Blocks of kind `run`: each against a fresh server with default flags, and it must exit 0.
#[test]
fn readme_runnable_doc_blocks_work_against_a_fresh_server() {
    let test = "readme::readme_runnable_doc_blocks_work_against_a_fresh_server";
    let blocks = sh_blocks("run");
    if blocks.is_empty() {
        return;
    }
    if !on_path("curl") {
        crate::skip::skip(test, "curl is not on PATH", "apt-get install curl");
        return;
    }
    for block in blocks {
        let tmp = tempfile::tempdir().unwrap();
        let bin = Binary::spawn(&tmp.path().join("data"), &[]);
        eprintln!("readme: running {}", block.at);
        run_against(&block.body, &bin.addr.to_string());
        bin.terminate();
    }
}

/// The command lines of a shell block: comment lines and blank lines dropped, `\` continuations
/// joined.
fn command_lines(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in body.lines() {
        if current.is_empty() && (line.trim().is_empty() || line.trim_start().starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// A command line split into words as `sh` splits it, for the plain lines the docs show: quotes
/// group and are removed, a word starting with `#` begins a comment. Expansions are not done.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, '#') if word.is_none() => break,
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The test command `.ci/run` runs, as the README must show it.
fn ci_test_command() -> String {
    let ci = std::fs::read_to_string(root().join(".ci/run")).expect("read .ci/run");
    let line = ci.lines().find(|l| l.trim_start().starts_with("cargo test")).expect(".ci/run runs no `cargo test`");
    line.split(" 2>&1").next().unwrap().split(" |").next().unwrap().trim().to_owned()
}

/// Contents for the files a documented `serve` line names, by flag.
fn fixture_for(flag: &str) -> Option<&'static str> {
    match flag {
        "--read-basic-auth-file" | "--write-basic-auth-file" => Some("# user:password\nreader:secret\n"),
        _ => None,
    }
}

/// Starts the built binary as a documented `serve` line would, in a temp directory as working
/// directory: same flags and environment, `--listen` made `127.0.0.1:0` and a `--data-dir`
/// moved into the temp directory. Checks that it answers `/-/healthy` (200, or 401 when the
/// line puts it behind credentials) and stops cleanly on SIGTERM.
fn check_serve_line(at: &str, env: &[(String, String)], args: &[String]) {
    assert!(
        !args.windows(2).any(|w| w[0] == "--storage" && w[1] == "clickhouse"),
        "{at}: a ClickHouse node's serve line belongs in a `clickhouse` block, which starts the shards"
    );
    let tmp = tempfile::tempdir().unwrap();
    let mut given: Vec<String> = Vec::new();
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let takes_value =
            flag.starts_with("--") && (inline.is_some() || iter.peek().is_some_and(|next| !next.starts_with("--")));
        let value = if takes_value { inline.or_else(|| iter.next().cloned()) } else { None };
        let value = match (flag.as_str(), value) {
            ("--listen", Some(_)) => Some("127.0.0.1:0".to_owned()),
            ("--data-dir", Some(v)) => Some(tmp.path().join(v.trim_start_matches('/')).display().to_string()),
            (f, Some(v)) => {
                let file = tmp.path().join(&v);
                if let Some(contents) = fixture_for(f) {
                    std::fs::write(&file, contents).unwrap();
                }
                Some(v)
            }
            (_, None) => None,
        };
        given.push(flag);
        given.extend(value);
    }
    let default_data_dir = !given.iter().any(|a| a == "--data-dir");
    if !given.iter().any(|a| a == "--listen") {
        given.extend(["--listen".to_owned(), "127.0.0.1:0".to_owned()]);
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .arg("serve")
        .args(&given)
        .current_dir(tmp.path())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn saltdb");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("read stdout");
    let Some(addr) = line.trim().strip_prefix("saltdb listening on ").map(str::to_owned) else {
        let out = child.wait_with_output().unwrap();
        panic!("{at}: `saltdb serve {}` did not start: {}", given.join(" "), String::from_utf8_lossy(&out.stderr));
    };
    let health = client().get(format!("http://{addr}/-/healthy")).send().expect("GET /-/healthy").status().as_u16();
    let protected = given.windows(2).any(|w| w[0] == "--health-auth" && w[1] == "read");
    let expected: &[u16] = if protected { &[200, 401] } else { &[200] };
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill -TERM");
    let out = child.wait_with_output().expect("wait");
    assert!(expected.contains(&health), "{at}: /-/healthy answered {health}");
    assert!(out.status.success(), "{at}: exited with {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    if default_data_dir {
        assert!(tmp.path().join("saltdb-data").is_dir(), "{at}: no ./saltdb-data, the documented default");
    }
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    eprintln!("readme: {at}: `saltdb serve {}` started and stopped (environment: {names:?})", given.join(" "));
}

/// Blocks of kind `serve`: every server they start starts with their flags, and their test
/// command is CI's.
#[test]
fn readme_serve_lines_start_the_server() {
    let blocks = sh_blocks("serve");
    assert!(!blocks.is_empty(), "no `serve` block: the README's first commands have one");
    let help = Command::new(env!("CARGO_BIN_EXE_saltdb")).args(["serve", "--help"]).output().expect("serve --help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains(&format!("[default: {README_ADDR}]")), "the documented address is not the default:\n{help}");
    assert!(help.contains("[default: ./saltdb-data]"), "the documented data directory is not the default:\n{help}");
    for block in blocks {
        for line in command_lines(&block.body) {
            let words = shell_words(&line);
            let split = words.iter().position(|w| !w.contains('=')).unwrap_or(words.len());
            let env: Vec<(String, String)> = words[..split]
                .iter()
                .map(|w| {
                    let (k, v) = w.split_once('=').unwrap();
                    (k.to_owned(), v.to_owned())
                })
                .collect();
            let command: Vec<&str> = words[split..].iter().map(String::as_str).collect();
            let args = match command.as_slice() {
                ["cargo", "run", "--release", "--", "serve", args @ ..] | ["saltdb", "serve", args @ ..] => args,
                ["cargo", "test", ..] => {
                    assert_eq!(command.join(" "), ci_test_command(), "{}: not the test command of .ci/run", block.at);
                    continue;
                }
                _ => panic!(
                    "{}: a `serve` block runs only `saltdb serve`, `cargo run ... serve` or `cargo test`: {line}",
                    block.at
                ),
            };
            let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
            check_serve_line(&block.at, &env, &args);
        }
    }
}

/// Every Prometheus configuration the README and docs/ show is one `promtool` accepts.
#[test]
fn readme_prometheus_configurations_are_valid() {
    let test = "readme::readme_prometheus_configurations_are_valid";
    if !crate::peers::available("promtool", test) {
        return;
    }
    let configs: Vec<Block> = all_blocks()
        .into_iter()
        .filter(|b| b.lang == "yaml")
        .filter(|b| ["remote_write", "remote_read", "scrape_configs"].iter().any(|k| b.body.contains(k)))
        .collect();
    assert!(configs.len() >= 4, "the Prometheus sections lost their configurations");
    let tmp = tempfile::tempdir().unwrap();
    for (i, config) in configs.iter().enumerate() {
        let path = tmp.path().join(format!("prometheus-{i}.yml"));
        std::fs::write(&path, &config.body).unwrap();
        let out = Command::new("promtool").arg("check").arg("config").arg(&path).output().expect("run promtool");
        assert!(
            out.status.success(),
            "promtool rejects the configuration at {}:\n{}\n{}{}",
            config.at,
            config.body,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("readme: {}: promtool check config passes", config.at);
    }
}

/// The two-shard ClickHouse walkthrough (docs/clickhouse.md), pasted into a shell: both shards
/// start, and a node started with the walkthrough's `serve` flags stores and answers through
/// them.
#[test]
fn readme_clickhouse_walkthrough_works() {
    let test = "readme::readme_clickhouse_walkthrough_works";
    if !crate::peers::installed("clickhouse-server", test, "clickhouse-server") {
        return;
    }
    let block = the_sh_block("clickhouse").body;
    let (shards, serve) = block.trim_end().rsplit_once('\n').expect("shard setup, then the serve line");
    let serve_args: Vec<&str> =
        serve.split_once(" -- serve ").expect("a `cargo run --release -- serve` line").1.split_whitespace().collect();
    let out = Command::new("sh").args(["-eu", "-c", shards]).stdin(Stdio::null()).output().expect("run sh");
    assert!(out.status.success(), "the walkthrough failed: {}", String::from_utf8_lossy(&out.stderr));
    let stop = || {
        let _ = Command::new("pkill").args(["-f", "saltdb-ch-"]).status();
    };
    let ready = |port: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if reqwest::blocking::get(format!("http://127.0.0.1:{port}/ping")).is_ok_and(|r| r.status().is_success()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    };
    if !(ready("8120") && ready("8121")) {
        stop();
        panic!("the walkthrough's shards did not answer on 8120 and 8121");
    }
    let tmp = tempfile::tempdir().unwrap();
    let node = Binary::spawn(&tmp.path().join("node"), &serve_args);
    let now = chrono::Utc::now().timestamp_millis();
    let line = format!(r#"{{"metric":{{"__name__":"walkthrough","a":"1"}},"values":[7],"timestamps":[{now}]}}"#);
    let stored = import(&node.url(""), line);
    let answer = get_json(&format!("{}/api/v1/query?query=walkthrough", node.url("")));
    node.terminate();
    stop();
    assert_eq!(stored, (204, String::new()));
    assert_eq!(answer["data"]["result"][0]["value"][1], "7", "{answer}");
}

/// The replicated walkthrough (docs/clickhouse.md): its ZooKeeper and four servers start on the
/// documented ports, the node its last line starts writes and answers, and goes on doing so
/// with the first replica of each shard killed.
#[test]
fn readme_clickhouse_replicated_walkthrough_works() {
    let test = "readme::readme_clickhouse_replicated_walkthrough_works";
    if !crate::peers::installed("clickhouse-server", test, "clickhouse-server") {
        return;
    }
    if !Path::new("/usr/share/zookeeper/bin/zkServer.sh").exists() {
        crate::skip::skip(test, "ZooKeeper is not installed", "apt-get install zookeeper");
        return;
    }
    let block = the_sh_block("clickhouse-replicated").body;
    let (servers, serve) = block.trim_end().rsplit_once('\n').expect("server setup, then the serve line");
    let words = shell_words(serve);
    let at = words.iter().position(|w| w == "serve").expect("a `cargo run --release -- serve` line");
    let serve_args: Vec<&str> = words[at + 1..].iter().map(String::as_str).collect();
    let stop = || {
        let _ = Command::new("pkill").args(["-f", "saltdb-chr-"]).status();
        let _ = Command::new("pkill").args(["-f", "saltdb-zk"]).status();
    };
    stop();
    let _ = std::fs::remove_dir_all("/tmp/saltdb-zk");
    for s in 0..2 {
        for r in 0..2 {
            let _ = std::fs::remove_dir_all(format!("/tmp/saltdb-chr-{s}-{r}"));
        }
    }
    let out = Command::new("sh").args(["-eu", "-c", servers]).stdin(Stdio::null()).output().expect("run sh");
    assert!(out.status.success(), "the walkthrough failed: {}", String::from_utf8_lossy(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(90);
    let zookeeper_up = || {
        use std::io::{Read, Write};
        let mut answer = String::new();
        std::net::TcpStream::connect("127.0.0.1:2191").is_ok_and(|mut c| {
            c.write_all(b"ruok").is_ok() && c.read_to_string(&mut answer).is_ok() && answer == "imok"
        })
    };
    let up = |port: u16| {
        reqwest::blocking::get(format!("http://127.0.0.1:{port}/ping")).is_ok_and(|r| r.status().is_success())
    };
    while !(zookeeper_up() && (8130..8134).all(up)) {
        if Instant::now() > deadline {
            stop();
            panic!("the walkthrough's ZooKeeper (2191) and servers (8130-8133) did not all answer within 90 s");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let tmp = tempfile::tempdir().unwrap();
    let node = Binary::spawn(&tmp.path().join("node"), &serve_args);
    let base = node.url("");
    let write = |n: u32| {
        let now = chrono::Utc::now().timestamp_millis();
        import(
            &base,
            format!(r#"{{"metric":{{"__name__":"walkthrough","n":"{n}"}},"values":[7],"timestamps":[{now}]}}"#),
        )
    };
    let count =
        || get_json(&format!("{base}/api/v1/query?query=count(walkthrough)"))["data"]["result"][0]["value"][1].clone();
    let before: Vec<(u16, String)> = (0..10).map(write).collect();
    let answer_before = count();
    // Writes are acknowledged by one replica (quorum 1): let the second replicas fetch them
    // before the first ones die.
    let fetched = || -> u64 {
        [8131, 8133]
            .iter()
            .filter_map(|port| {
                client()
                    .post(format!("http://127.0.0.1:{port}/"))
                    .body("SELECT count() FROM saltdb.samples")
                    .send()
                    .ok()?
                    .text()
                    .ok()?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while fetched() < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = Command::new("pkill").args(["-9", "-f", "saltdb-chr-0-0/"]).status();
    let _ = Command::new("pkill").args(["-9", "-f", "saltdb-chr-1-0/"]).status();
    let after: Vec<(u16, String)> = (10..20).map(write).collect();
    let answer_after = count();
    node.terminate();
    stop();
    assert!(before.iter().chain(&after).all(|r| r.0 == 204), "{before:?} {after:?}");
    assert_eq!(answer_before, "10");
    assert_eq!(answer_after, "20", "answered by the second replicas");
}

/// The Grafana block (docs/grafana.md), from the repository's root: the directories its
/// variables name hold the dashboards and the provisioning files that read those variables, and
/// the commented Docker variant maps the same directories into the container. Grafana itself is
/// started with the block's own lines only when `grafana` is on PATH: Debian does not package
/// it, so CI cannot install it (`cargo test --test it grafana` checks what Grafana sends and
/// expects without it).
#[test]
fn readme_grafana_block_matches_the_provisioning() {
    let block = the_sh_block("grafana");
    let pwd = root().display().to_string();
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut command = Vec::new();
    for line in command_lines(&block.body) {
        let words = shell_words(&line);
        let words = if words.first().is_some_and(|w| w == "export") { &words[1..] } else { &words[..] };
        for word in words {
            match word.split_once('=') {
                Some((k, v)) if command.is_empty() => {
                    vars.insert(k.to_owned(), v.replace("$PWD", &pwd));
                }
                _ => command.push(word.clone()),
            }
        }
    }
    assert_eq!(command.first().map(String::as_str), Some("grafana"), "{}: the block starts Grafana", block.at);
    let dashboards = PathBuf::from(vars.get("SALTDB_DASHBOARDS").expect("SALTDB_DASHBOARDS is set"));
    let provisioning = PathBuf::from(vars.get("GF_PATHS_PROVISIONING").expect("GF_PATHS_PROVISIONING is set"));
    let files = |dir: &Path, ext: &str| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {}: {e}", block.at, dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect()
    };
    assert!(!files(&dashboards, "json").is_empty(), "{}: no dashboards in {}", block.at, dashboards.display());
    assert!(!files(&provisioning.join("datasources"), "yaml").is_empty(), "{}: no data source", block.at);
    let providers = files(&provisioning.join("dashboards"), "yaml");
    assert!(
        providers.iter().any(|p| std::fs::read_to_string(p).unwrap().contains("${SALTDB_DASHBOARDS}")),
        "{}: no dashboard provider reads $SALTDB_DASHBOARDS",
        block.at
    );

    // `# docker run ... -v HOST:CONTAINER -e NAME=VALUE`: the container sees the same files.
    let docker: String = block
        .body
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .skip_while(|l| !l.trim_start().starts_with("docker run"))
        .map(|l| l.trim_end_matches('\\'))
        .collect::<Vec<_>>()
        .join(" ");
    let words = shell_words(&docker);
    assert!(!words.is_empty(), "{}: the Docker variant is gone", block.at);
    let mut mounts = Vec::new();
    let mut env = BTreeMap::new();
    for pair in words.windows(2) {
        match pair[0].as_str() {
            "-v" => mounts.push(pair[1].replace("$PWD", &pwd)),
            "-e" => {
                let (k, v) = pair[1].split_once('=').expect("-e NAME=VALUE");
                env.insert(k.to_owned(), v.to_owned());
            }
            _ => {}
        }
    }
    for name in ["SALTDB_DASHBOARDS", "GF_PATHS_PROVISIONING"] {
        let inside = env.get(name).unwrap_or_else(|| panic!("{}: docker run sets no {name}", block.at));
        let outside = mounts.iter().find_map(|m| {
            let (host, container) = m.split_once(':')?;
            Some(format!("{host}{}", inside.strip_prefix(container)?))
        });
        assert_eq!(outside.as_ref(), vars.get(name), "{}: in Docker, {name} is not the same directory", block.at);
    }

    if !on_path("grafana") {
        eprintln!(
            "readme: {}: paths and variables checked; Grafana itself not started (no `grafana` on PATH)",
            block.at
        );
        return;
    }
    // Grafana on PATH: the block's own lines, on a free port, with data and logs in a temp dir.
    let tmp = tempfile::tempdir().unwrap();
    let port = crate::peers::free_port();
    let script: String = command_lines(&block.body).join("\n");
    let mut grafana = std::os::unix::process::CommandExt::process_group(
        Command::new("sh").args(["-eu", "-c", &script]).current_dir(root()),
        0,
    )
    .env("GF_SERVER_HTTP_ADDR", "127.0.0.1")
    .env("GF_SERVER_HTTP_PORT", port.to_string())
    .env("GF_PATHS_DATA", tmp.path().join("data"))
    .env("GF_PATHS_LOGS", tmp.path().join("logs"))
    .env("GF_PATHS_PLUGINS", tmp.path().join("plugins"))
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("start grafana");
    let base = format!("http://127.0.0.1:{port}");
    let get = |path: &str| -> Option<Value> {
        let r = client().get(format!("{base}{path}")).basic_auth("admin", Some("admin")).send().ok()?;
        if r.status().is_success() {
            serde_json::from_str(&r.text().ok()?).ok()
        } else {
            None
        }
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut found = None;
    while Instant::now() < deadline && found.is_none() {
        std::thread::sleep(Duration::from_millis(500));
        let source = get("/api/datasources/name/saltdb");
        let dashboards = get("/api/search?type=dash-db").and_then(|d| d.as_array().map(Vec::len));
        if let (Some(source), Some(n)) = (source, dashboards.filter(|n| *n >= 2)) {
            found = Some((source, n));
        }
    }
    let _ = Command::new("kill").args(["-TERM", &format!("-{}", grafana.id())]).status();
    let _ = grafana.wait();
    let (source, _) =
        found.unwrap_or_else(|| panic!("{}: Grafana did not provision saltdb's data source and dashboards", block.at));
    assert_eq!(source["type"], "prometheus", "{source}");
}
