//! Request parameters as Prometheus takes them: from the query string and, for POST, from an
//! `application/x-www-form-urlencoded` body; repeated keys (`match[]`) allowed. Times as RFC3339
//! or Unix seconds (float); selectors parsed by `promql-parser`.

use super::error::ApiError;
use crate::matcher::Matcher;

/// Most `match[]` selectors one request may carry. Each is parsed, its regexes compiled and
/// looked up separately, so without a bound a 2 MB form of distinct regex selectors keeps a core
/// busy for minutes; Grafana and Prometheus' own UI send one or a handful.
pub const MAX_SELECTORS: usize = 1_000;

/// Decoded parameters in request order.
#[derive(Debug, Default, Clone)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// Parses a query string and an optional form body.
    pub fn parse(query: Option<&str>, form: Option<&[u8]>) -> Self {
        let mut pairs: Vec<(String, String)> =
            query.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
        if let Some(body) = form {
            pairs.extend(form_urlencoded::parse(body).into_owned());
        }
        Self(pairs)
    }

    /// The last value of `name`, if given and non-empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.as_str())
    }

    /// Whether the flag `name` is set: given bare (`?details`) or with any value but `false` or
    /// `0`, as OpenTSDB reads its flags.
    pub fn flag(&self, name: &str) -> bool {
        self.0.iter().rev().find(|(k, _)| k == name).is_some_and(|(_, v)| v != "false" && v != "0")
    }

    /// Every value of `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect()
    }

    /// Fails on a parameter the endpoint does not know, naming it and the known ones.
    ///
    /// For the write doors and the admin API only, where a misspelled parameter would change what
    /// is stored or deleted (`precison=s`, `strat=`). The query API's read endpoints ignore what
    /// they do not read, as Prometheus and VictoriaMetrics do: clients add their own (`nocache`,
    /// `partial_response`, `dedup`, Grafana's custom parameters).
    ///
    /// # Errors
    /// [`ApiError::BadData`].
    pub fn reject_unknown(&self, known: &[&str]) -> Result<(), ApiError> {
        match self.0.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some((k, _)) => {
                Err(ApiError::BadData(format!("unknown parameter {k:?}; this endpoint accepts {}", known.join(", "))))
            }
        }
    }

    /// A time parameter in ms, or `default` when absent.
    ///
    /// # Errors
    /// [`ApiError::BadData`] naming the parameter.
    pub fn time_ms(&self, name: &str, default: i64) -> Result<i64, ApiError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => crate::timestamp::parse_ms(v)
                .map_err(|why| ApiError::BadData(format!("invalid parameter {name:?}: {why}"))),
        }
    }

    /// Every `match[]` selector, parsed.
    ///
    /// # Errors
    /// [`ApiError::BadData`] naming the selector.
    pub fn selectors(&self, name: &str) -> Result<Vec<Vec<Matcher>>, ApiError> {
        let given = self.all(name);
        if given.len() > MAX_SELECTORS {
            return Err(ApiError::BadData(format!(
                "too many {name:?} parameters: {} given, at most {MAX_SELECTORS} are accepted per request",
                given.len()
            )));
        }
        let mut out = Vec::new();
        for s in given {
            out.extend(
                parse_selector(s).map_err(|why| ApiError::BadData(format!("invalid parameter {name:?}: {why}")))?,
            );
        }
        Ok(out)
    }
}

/// Parses a Prometheus duration: `5m`, `1h30m` or float seconds; returns ms.
///
/// # Errors
/// A message saying what was expected.
pub fn parse_duration_ms(s: &str) -> Result<i64, String> {
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 || secs * 1000.0 > i64::MAX as f64 {
            return Err(format!("cannot parse {s:?} to a valid duration"));
        }
        return Ok((secs * 1000.0).round() as i64);
    }
    crate::duration::parse_ms(s).map_err(|e| e.to_string())
}

/// Selectors remembered by [`parse_selector`].
const SELECTOR_CACHE_ENTRIES: usize = 1024;
/// Longest selector text [`parse_selector`] remembers (bounds the cache's memory).
const SELECTOR_CACHE_MAX_LEN: usize = 1024;

/// Parsed selectors by their text. Dashboards send the same few `match[]` selectors again and
/// again (template variables, one host's panels); parsing one, with its regexes compiled twice
/// (by the parser, then with saltdb's anchoring), was a fifth of a `label values` request with a
/// regex `match[]` at 1 M series. Cached matchers also share their regexes' lazy-DFA state.
fn selector_cache() -> &'static quick_cache::sync::Cache<String, std::sync::Arc<Vec<Vec<Matcher>>>> {
    static CACHE: std::sync::OnceLock<quick_cache::sync::Cache<String, std::sync::Arc<Vec<Vec<Matcher>>>>> =
        std::sync::OnceLock::new();
    CACHE.get_or_init(|| quick_cache::sync::Cache::new(SELECTOR_CACHE_ENTRIES))
}

/// Parses a series selector (`up`, `{job="x"}`, `up{a=~"b.*"}`, `{a="1" or b="2"}`) into one
/// matcher list per alternative. Selectors up to [`SELECTOR_CACHE_MAX_LEN`] bytes that parse
/// are remembered (see [`selector_cache`]); errors are not.
///
/// # Errors
/// A message from the parser, or one saying the text is not a plain selector.
pub fn parse_selector(s: &str) -> Result<Vec<Vec<Matcher>>, String> {
    if s.len() > SELECTOR_CACHE_MAX_LEN {
        return parse_selector_uncached(s);
    }
    // Inserts only what parsed; concurrent requests for one selector parse it once.
    let parsed = selector_cache().get_or_insert_with(s, || parse_selector_uncached(s).map(std::sync::Arc::new))?;
    Ok(parsed.as_ref().clone())
}

fn parse_selector_uncached(s: &str) -> Result<Vec<Vec<Matcher>>, String> {
    use promql_parser::parser::Expr;
    // The guarded parser: the raw promql-parser recurses once per bracket and would overflow the
    // stack (aborting the whole server) on a selector of 100k nested parentheses.
    let expr = crate::promql::parse(s).map_err(|e| format!("{}: {e}", truncated(s)))?;
    let Expr::VectorSelector(vs) = expr else {
        return Err(format!("{} is not a series selector", truncated(s)));
    };
    selector_groups(&vs)
}

/// The matcher lists of a parsed selector: its matchers plus the metric name written before the
/// braces, one list per `or` group.
///
/// # Errors
/// A matcher saltdb cannot build (a regex that does not compile).
pub fn selector_groups(vs: &promql_parser::parser::VectorSelector) -> Result<Vec<Vec<Matcher>>, String> {
    let convert = |ms: &[promql_parser::label::Matcher]| -> Result<Vec<Matcher>, String> {
        let mut out: Vec<Matcher> =
            ms.iter().map(Matcher::from_parsed).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
        if let Some(name) = &vs.name {
            if !out.iter().any(|m| m.name == crate::labels::METRIC_NAME) {
                out.push(Matcher::equal(crate::labels::METRIC_NAME, name.clone()));
            }
        }
        Ok(out)
    };
    if vs.matchers.or_matchers.is_empty() {
        Ok(vec![convert(&vs.matchers.matchers)?])
    } else {
        vs.matchers.or_matchers.iter().map(|ms| convert(ms)).collect()
    }
}

/// `s` quoted for an error message, cut after 200 characters so a megabyte-long parameter does
/// not come back whole in the error body.
pub fn truncated(s: &str) -> String {
    const MAX: usize = 200;
    match s.char_indices().nth(MAX) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", s.get(..cut).unwrap_or(""), s.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::MatchOp;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("15"), Ok(15_000));
        assert_eq!(parse_duration_ms("0.5"), Ok(500));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert!(parse_duration_ms("-1").is_err());
    }

    #[test]
    fn selectors() {
        let s = parse_selector(r#"up{job=~"a.*",x!="y"}"#).unwrap();
        assert_eq!(s.len(), 1);
        let ms = &s[0];
        assert!(ms.iter().any(|m| m.name == "__name__" && m.value == "up" && m.op == MatchOp::Equal));
        assert!(ms.iter().any(|m| m.name == "job" && m.op == MatchOp::RegexMatch));
        assert!(parse_selector("rate(up[5m])").is_err());
        assert!(parse_selector("{").is_err());
    }

    #[test]
    fn remembered_selectors_answer_as_parsed_ones_and_errors_are_not_remembered() {
        let text = r#"node_load1{instance=~"host-1.*" or job="db"}"#;
        let first = parse_selector(text).unwrap();
        let again = parse_selector(text).unwrap();
        assert_eq!(first.len(), 2);
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
        assert!(again[0].iter().any(|m| m.name == "instance" && m.matches("host-12") && !m.matches("db-1")));
        for _ in 0..2 {
            assert!(parse_selector("up{").unwrap_err().contains("up{"));
        }
        // Longer than the cache takes: parsed every time, same answer.
        let long = format!("up{{job=\"{}\"}}", "x".repeat(SELECTOR_CACHE_MAX_LEN));
        assert_eq!(parse_selector(&long).unwrap()[0].len(), 2);
    }
}
