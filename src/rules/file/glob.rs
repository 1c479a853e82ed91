//! Go's `filepath.Glob` and `filepath.Match` (Unix), which Prometheus applies to each
//! `rule_files` entry: `*` (any run of characters but `/`), `?` (one character but `/`),
//! `[a-z]` and `[^a-z]` (one character of a class), `\x` (the character `x`). Patterns match
//! within one path segment each; a pattern may have them in several segments
//! (`rules/*/*.yml`). `**` is `*` twice, not a recursive match. Names starting with `.` match
//! like any other. Matches come sorted within each directory, as Go lists them.

/// A malformed pattern (Go's `filepath.ErrBadPattern`, "syntax error in pattern").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BadPattern;

/// Whether `path` has any of the characters `Match` treats specially.
pub(super) fn has_meta(path: &str) -> bool {
    path.contains(['*', '?', '[', '\\'])
}

/// Go's `filepath.Glob`: the paths matching `pattern`; none is not an error (and neither is a
/// plain path that does not exist: it matches nothing). File system errors are ignored.
///
/// # Errors
/// [`BadPattern`] when `pattern` is malformed.
pub(super) fn glob(pattern: &str) -> Result<Vec<String>, BadPattern> {
    glob_at_depth(pattern, 0)
}

fn glob_at_depth(pattern: &str, depth: usize) -> Result<Vec<String>, BadPattern> {
    matches(pattern, "")?;
    // Go's limit on the recursion over path segments.
    if depth == 10_000 {
        return Err(BadPattern);
    }
    if !has_meta(pattern) {
        return Ok(if std::fs::symlink_metadata(pattern).is_ok() { vec![pattern.to_owned()] } else { Vec::new() });
    }
    let (dir, file) = split(pattern);
    let dir = clean_glob_dir(dir);
    if !has_meta(dir) {
        return glob_in(dir, file);
    }
    if dir == pattern {
        return Err(BadPattern);
    }
    let mut found = Vec::new();
    for d in glob_at_depth(dir, depth + 1)? {
        found.extend(glob_in(&d, file)?);
    }
    Ok(found)
}

/// Go's `filepath.Split`: everything up to and including the last `/`, and the rest.
fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..=i], &path[i + 1..]),
        None => ("", path),
    }
}

/// Go's `cleanGlobPath`: `.` for nothing, `/` kept, else the trailing `/` removed.
fn clean_glob_dir(dir: &str) -> &str {
    match dir {
        "" => ".",
        "/" => dir,
        _ => &dir[..dir.len() - 1],
    }
}

/// The names in directory `dir` matching `pattern`, sorted, joined to `dir` (Go's `glob`).
fn glob_in(dir: &str, pattern: &str) -> Result<Vec<String>, BadPattern> {
    if !std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Ok(Vec::new());
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
    let mut names: Vec<String> =
        entries.filter_map(|e| e.ok().and_then(|e| e.file_name().into_string().ok())).collect();
    names.sort();
    let mut found = Vec::new();
    for name in names {
        if matches(pattern, &name)? {
            found.push(join(dir, &name));
        }
    }
    Ok(found)
}

/// Go's `filepath.Join(dir, name)`: joined, then cleaned.
fn join(dir: &str, name: &str) -> String {
    clean(&format!("{dir}/{name}"))
}

/// Go's `filepath.Clean`: the shortest equivalent path, by lexical processing.
fn clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." => {
                    parts.pop();
                }
                _ if rooted => {}
                _ => parts.push(".."),
            },
            _ => parts.push(part),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// Go's `filepath.Match`: whether all of `name` matches `pattern`.
///
/// # Errors
/// [`BadPattern`] when `pattern` is malformed (checked to its end, even past a mismatch).
pub(super) fn matches(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let (mut pattern, mut name) = (pattern, name);
    'chunks: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing `*` matches the rest of the name unless it has a `/`.
            return Ok(!name.contains('/'));
        }
        let (tail, ok) = match_chunk(chunk, name)?;
        if ok && (tail.is_empty() || !pattern.is_empty()) {
            name = tail;
            continue;
        }
        if star {
            // Try the chunk after skipping 1, 2, ... bytes of the name, never a `/`.
            for (i, b) in name.bytes().enumerate() {
                if b == b'/' {
                    break;
                }
                let Some(after) = name.get(i + 1..) else { continue };
                let (tail, ok) = match_chunk(chunk, after)?;
                if ok {
                    if pattern.is_empty() && !tail.is_empty() {
                        continue;
                    }
                    name = tail;
                    continue 'chunks;
                }
            }
        }
        // No match: the rest of the pattern must still be well-formed.
        while !pattern.is_empty() {
            let (_, chunk, rest) = scan_chunk(pattern);
            pattern = rest;
            match_chunk(chunk, "")?;
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Go's `scanChunk`: leading stars, then the text up to the next star outside a class.
fn scan_chunk(pattern: &str) -> (bool, &str, &str) {
    let trimmed = pattern.trim_start_matches('*');
    let star = trimmed.len() != pattern.len();
    let bytes = trimmed.as_bytes();
    let (mut i, mut in_class) = (0, false);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 < bytes.len() => i += 1,
            b'[' => in_class = true,
            b']' => in_class = false,
            b'*' if !in_class => break,
            _ => {}
        }
        i += 1;
    }
    (star, &trimmed[..i], &trimmed[i..])
}

/// Go's `matchChunk`: whether `chunk` (no stars) matches the start of `s`, and the rest of `s`.
/// The whole chunk is read even after a mismatch, to find a malformed one.
fn match_chunk<'s>(chunk: &str, s: &'s str) -> Result<(&'s str, bool), BadPattern> {
    let mut chunk = chunk;
    let mut s = s;
    let mut failed = false;
    while let Some(c) = chunk.chars().next() {
        if !failed && s.is_empty() {
            failed = true;
        }
        match c {
            '[' => {
                let r = if failed { None } else { s.chars().next() };
                if let Some(r) = r {
                    s = &s[r.len_utf8()..];
                }
                chunk = &chunk[1..];
                let (rest, in_class) = match_class(chunk, r)?;
                chunk = rest;
                failed |= !in_class;
            }
            '?' => {
                if !failed {
                    match s.chars().next() {
                        Some('/') | None => failed = true,
                        Some(r) => s = &s[r.len_utf8()..],
                    }
                }
                chunk = &chunk[1..];
            }
            _ => {
                let literal_at = if c == '\\' { 1 } else { 0 };
                let Some(literal) = chunk[literal_at..].chars().next() else { return Err(BadPattern) };
                if !failed {
                    match s.chars().next() {
                        Some(r) if r == literal => s = &s[r.len_utf8()..],
                        _ => failed = true,
                    }
                }
                chunk = &chunk[literal_at + literal.len_utf8()..];
            }
        }
    }
    Ok(if failed { ("", false) } else { (s, true) })
}

/// A character class after its `[`: whether `r` is in it (false for no character), and the
/// chunk after its `]`.
fn match_class(chunk: &str, r: Option<char>) -> Result<(&str, bool), BadPattern> {
    let (negated, mut chunk) = match chunk.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, chunk),
    };
    let (mut matched, mut ranges) = (false, 0);
    loop {
        if ranges > 0 {
            if let Some(rest) = chunk.strip_prefix(']') {
                chunk = rest;
                break;
            }
        }
        let (lo, rest) = class_char(chunk)?;
        let (hi, rest) = match rest.strip_prefix('-') {
            Some(after) => class_char(after)?,
            None => (lo, rest),
        };
        chunk = rest;
        if r.is_some_and(|r| lo <= r && r <= hi) {
            matched = true;
        }
        ranges += 1;
    }
    Ok((chunk, r.is_some() && matched != negated))
}

/// Go's `getEsc`: one (possibly escaped) character of a class; something must follow it.
fn class_char(chunk: &str) -> Result<(char, &str), BadPattern> {
    let chunk = match chunk.chars().next() {
        None | Some('-' | ']') => return Err(BadPattern),
        Some('\\') => &chunk[1..],
        Some(_) => chunk,
    };
    let c = chunk.chars().next().ok_or(BadPattern)?;
    let rest = &chunk[c.len_utf8()..];
    if rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((c, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's `path/filepath` match tests (Unix).
    #[test]
    fn matches_as_go() {
        let ok = |p: &str, s: &str| matches(p, s);
        let cases: &[(&str, &str, Result<bool, BadPattern>)] = &[
            ("abc", "abc", Ok(true)),
            ("*", "abc", Ok(true)),
            ("*c", "abc", Ok(true)),
            ("a*", "a", Ok(true)),
            ("a*", "abc", Ok(true)),
            ("a*", "ab/c", Ok(false)),
            ("a*/b", "abc/b", Ok(true)),
            ("a*/b", "a/c/b", Ok(false)),
            ("a*b*c*d*e*/f", "axbxcxdxe/f", Ok(true)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/f", Ok(true)),
            ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", Ok(false)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", Ok(false)),
            ("a*b?c*x", "abxbbxdbxebxczzx", Ok(true)),
            ("a*b?c*x", "abxbbxdbxebxczzy", Ok(false)),
            ("ab[c]", "abc", Ok(true)),
            ("ab[b-d]", "abc", Ok(true)),
            ("ab[e-g]", "abc", Ok(false)),
            ("ab[^c]", "abc", Ok(false)),
            ("ab[^b-d]", "abc", Ok(false)),
            ("ab[^e-g]", "abc", Ok(true)),
            ("a\\*b", "a*b", Ok(true)),
            ("a\\*b", "ab", Ok(false)),
            ("a?b", "a☺b", Ok(true)),
            ("a[^a]b", "a☺b", Ok(true)),
            ("a???b", "a☺b", Ok(false)),
            ("a[^a][^a][^a]b", "a☺b", Ok(false)),
            ("[a-ζ]*", "α", Ok(true)),
            ("*[a-ζ]", "A", Ok(false)),
            ("a?b", "a/b", Ok(false)),
            ("a*b", "a/b", Ok(false)),
            ("[\\]a]", "]", Ok(true)),
            ("[\\-]", "-", Ok(true)),
            ("[x\\-]", "x", Ok(true)),
            ("[x\\-]", "-", Ok(true)),
            ("[x\\-]", "z", Ok(false)),
            ("[\\-x]", "x", Ok(true)),
            ("[\\-x]", "-", Ok(true)),
            ("[\\-x]", "a", Ok(false)),
            ("[]a]", "]", Err(BadPattern)),
            ("[-]", "-", Err(BadPattern)),
            ("[x-]", "x", Err(BadPattern)),
            ("[x-]", "-", Err(BadPattern)),
            ("[x-]", "z", Err(BadPattern)),
            ("[-x]", "x", Err(BadPattern)),
            ("[-x]", "-", Err(BadPattern)),
            ("[-x]", "a", Err(BadPattern)),
            ("\\", "a", Err(BadPattern)),
            ("[a-b-c]", "a", Err(BadPattern)),
            ("[", "a", Err(BadPattern)),
            ("[^", "a", Err(BadPattern)),
            ("[^bc", "a", Err(BadPattern)),
            ("a[", "a", Err(BadPattern)),
            ("a[", "ab", Err(BadPattern)),
            ("a[", "x", Err(BadPattern)),
            ("a/b[", "x", Err(BadPattern)),
            ("*x", "xxx", Ok(true)),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(ok(pattern, name), *want, "Match({pattern:?}, {name:?})");
        }
    }

    #[test]
    fn globs_as_go() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap();
        for f in ["b.yml", "a.yml", ".hidden.yml", "c.yaml", "sub/d.yml", "sub/e.txt", "sub2/f.yml"] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        let names = |pattern: &str| -> Vec<String> {
            glob(&format!("{root}/{pattern}"))
                .unwrap()
                .into_iter()
                .map(|p| p.strip_prefix(root).unwrap().trim_start_matches('/').to_owned())
                .collect()
        };
        assert_eq!(names("*.yml"), [".hidden.yml", "a.yml", "b.yml"]);
        assert_eq!(names("*/*.yml"), ["sub/d.yml", "sub2/f.yml"]);
        assert_eq!(names("**.yml"), [".hidden.yml", "a.yml", "b.yml"]);
        assert_eq!(names("[ab].y?l"), ["a.yml", "b.yml"]);
        assert_eq!(names("nothing*"), Vec::<String>::new());
        assert_eq!(names("a.yml"), ["a.yml"]);
        assert_eq!(names("missing.yml"), Vec::<String>::new());
        assert_eq!(glob(&format!("{root}/[")), Err(BadPattern));
        assert_eq!(glob(&format!("{root}/x[/*.yml")), Err(BadPattern));
    }

    #[test]
    fn cleans_as_go() {
        assert_eq!(clean("./a.yml"), "a.yml");
        assert_eq!(clean("a//b/../c"), "a/c");
        assert_eq!(clean("/../a"), "/a");
        assert_eq!(clean("../a"), "../a");
        assert_eq!(clean(""), ".");
        assert_eq!(join(".", "a.yml"), "a.yml");
        assert_eq!(join("/", "a.yml"), "/a.yml");
    }
}
