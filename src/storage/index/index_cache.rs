//! Answers of the window index kept between requests: per window keyspace, its label names, the
//! values of a label, and the candidate ids of a selection. A dashboard asks the same metadata
//! questions at every refresh (template variables, one host's panels); while no index row
//! changed, each is a lookup instead of a walk of postings rows.
//!
//! Invariant: an answer is used only while the *index generation* it was computed under is
//! current. Every code path that adds or removes window-index or postings rows (new series in
//! a group commit or a head flush, seals and re-seals, deletes, churn removal, retention drops,
//! migrations) calls [`IndexCache::changed`] *after* its commit. A reader reads the generation
//! *before* it reads the index, so an answer that may have missed a commit is stored under a
//! generation that commit's bump has already left behind, and is never used. Writes of samples
//! for known series move no index row and leave the answers valid: a steady fleet keeps its
//! answers, new series make the next request compute afresh (as VictoriaMetrics resets its tag
//! filter cache when it registers a series).
//!
//! Keyspace names are never reused (see `Shared::allocate_generation`), so the answers of a
//! dropped or replaced keyspace are only ever evicted, never read for another.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::matchers::Selection;
use crate::storage::error::Result;
use crate::storage::series_id::SeriesId;

/// The largest share of the budget one answer may take (a huge value or id list is computed
/// each time rather than evicting everything else).
const MAX_SHARE: u64 = 8;

/// What was asked of one keyspace.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Question {
    /// Every label name.
    Names,
    /// Every value of one label.
    Values(Box<str>),
    /// Candidate ids of a selection (its matchers, encoded by [`selection_key`]).
    Candidates(Box<[u8]>),
}

/// The key of an answer.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    keyspace: Box<str>,
    question: Question,
}

impl Key {
    fn new(ks: &fjall::Keyspace, question: Question) -> Self {
        Self { keyspace: ks.name().as_ref().into(), question }
    }
}

/// An answer and the generation it was computed under.
#[derive(Clone)]
struct Entry {
    generation: u64,
    answer: Answer,
}

/// Names or values (sorted), or ids (ascending).
#[derive(Clone)]
enum Answer {
    Strings(Arc<[String]>),
    Ids(Arc<[SeriesId]>),
}

/// The weight of an entry: its strings or ids, their headers, the key and the entry.
#[derive(Clone)]
struct Weight;

impl quick_cache::Weighter<Key, Entry> for Weight {
    fn weight(&self, key: &Key, entry: &Entry) -> u64 {
        let answer = match &entry.answer {
            Answer::Strings(s) => s.iter().map(|s| s.len() + 24).sum::<usize>(),
            Answer::Ids(ids) => ids.len() * 8,
        };
        let question = match &key.question {
            Question::Names => 0,
            Question::Values(v) => v.len(),
            Question::Candidates(c) => c.len(),
        };
        (answer + question + key.keyspace.len() + 96) as u64
    }
}

/// The cache (see the module doc).
pub struct IndexCache {
    generation: AtomicU64,
    entries: quick_cache::sync::Cache<Key, Entry, Weight>,
    max_weight: u64,
}

impl IndexCache {
    /// A cache holding answers of at most `bytes` in all (none when 0).
    pub fn new(bytes: u64) -> Self {
        let items = usize::try_from(bytes / 512).unwrap_or(usize::MAX).max(1);
        Self {
            generation: AtomicU64::new(0),
            entries: quick_cache::sync::Cache::with_weighter(items, bytes.max(1), Weight),
            max_weight: bytes / MAX_SHARE,
        }
    }

    /// Records that index rows were added or removed: every answer held becomes stale. Call it
    /// after the commit that changed them.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Bytes of the answers held (their weights).
    pub fn bytes(&self) -> u64 {
        self.entries.weight()
    }

    /// The label names of `ks` (sorted), from `walk` when no current answer is held.
    ///
    /// # Errors
    /// Those of `walk`.
    pub fn names(&self, ks: &fjall::Keyspace, walk: impl FnOnce() -> Result<Vec<String>>) -> Result<Arc<[String]>> {
        self.strings(Key::new(ks, Question::Names), || Ok((walk()?, true)))
    }

    /// The values of label `name` in `ks` (sorted): all of them when held, else what `walk`
    /// gives, with whether that is all of them (a caller with a limit may stop early; only a
    /// whole answer is kept).
    ///
    /// # Errors
    /// Those of `walk`.
    pub fn values(
        &self,
        ks: &fjall::Keyspace,
        name: &str,
        walk: impl FnOnce() -> Result<(Vec<String>, bool)>,
    ) -> Result<Arc<[String]>> {
        self.strings(Key::new(ks, Question::Values(name.into())), walk)
    }

    /// The candidate ids of `sel` in `ks` (ascending), held or from `walk`.
    ///
    /// # Errors
    /// Those of `walk`.
    pub fn candidates(
        &self,
        ks: &fjall::Keyspace,
        sel: &Selection,
        walk: impl FnOnce() -> Result<Vec<SeriesId>>,
    ) -> Result<Arc<[SeriesId]>> {
        let key = Key::new(ks, Question::Candidates(selection_key(sel)));
        // Read before the index is (see the module doc).
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(Answer::Ids(ids)) = self.current(&key, generation) {
            return Ok(ids);
        }
        let ids: Arc<[SeriesId]> = walk()?.into();
        self.store(key, Entry { generation, answer: Answer::Ids(Arc::clone(&ids)) });
        Ok(ids)
    }

    /// The candidate ids of `sel` in `ks` when a current answer is held; never walks (for
    /// callers that must not block).
    pub fn held_candidates(&self, ks: &fjall::Keyspace, sel: &Selection) -> Option<Arc<[SeriesId]>> {
        let key = Key::new(ks, Question::Candidates(selection_key(sel)));
        match self.held(&key)? {
            Answer::Ids(ids) => Some(ids),
            Answer::Strings(_) => None,
        }
    }

    /// The label names of `ks` when a current answer is held; never walks.
    pub fn held_names(&self, ks: &fjall::Keyspace) -> Option<Arc<[String]>> {
        self.held_strings(&Key::new(ks, Question::Names))
    }

    /// Every value of label `name` in `ks` when a current answer is held; never walks.
    pub fn held_values(&self, ks: &fjall::Keyspace, name: &str) -> Option<Arc<[String]>> {
        self.held_strings(&Key::new(ks, Question::Values(name.into())))
    }

    fn held_strings(&self, key: &Key) -> Option<Arc<[String]>> {
        match self.held(key)? {
            Answer::Strings(found) => Some(found),
            Answer::Ids(_) => None,
        }
    }

    fn held(&self, key: &Key) -> Option<Answer> {
        self.current(key, self.generation.load(Ordering::Acquire))
    }

    /// The answer held for `key` if it was computed under `generation`.
    fn current(&self, key: &Key, generation: u64) -> Option<Answer> {
        self.entries.get(key).filter(|e| e.generation == generation).map(|e| e.answer)
    }

    fn strings(&self, key: Key, walk: impl FnOnce() -> Result<(Vec<String>, bool)>) -> Result<Arc<[String]>> {
        // Read before the index is (see the module doc).
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(Answer::Strings(found)) = self.current(&key, generation) {
            return Ok(found);
        }
        let (found, whole) = walk()?;
        let found: Arc<[String]> = found.into();
        if whole {
            self.store(key, Entry { generation, answer: Answer::Strings(Arc::clone(&found)) });
        }
        Ok(found)
    }

    fn store(&self, key: Key, entry: Entry) {
        use quick_cache::Weighter;
        if Weight.weight(&key, &entry) <= self.max_weight {
            self.entries.insert(key, entry);
        }
    }
}

/// The matchers of a selection as bytes, in order, each as its op, then its name and its value
/// each preceded by its length: equal bytes are equal matchers.
fn selection_key(sel: &Selection) -> Box<[u8]> {
    let mut out = Vec::new();
    for m in sel.matchers() {
        out.push(m.op as u8);
        for part in [&m.name, &m.value] {
            out.extend_from_slice(&(part.len() as u64).to_be_bytes());
            out.extend_from_slice(part.as_bytes());
        }
    }
    out.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::{MatchOp, Matcher};

    fn keyspace(name: &str) -> (tempfile::TempDir, fjall::Keyspace) {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let ks = db.keyspace(name, fjall::KeyspaceCreateOptions::default).unwrap();
        (dir, ks)
    }

    #[test]
    fn answers_are_used_until_the_generation_moves() {
        let (_dir, ks) = keyspace("w");
        let cache = IndexCache::new(1 << 20);
        let walks = std::cell::Cell::new(0);
        let walk = |v: &str| {
            walks.set(walks.get() + 1);
            Ok(vec![v.to_owned()])
        };
        assert_eq!(&*cache.names(&ks, || walk("a")).unwrap(), ["a"]);
        assert_eq!(&*cache.names(&ks, || walk("b")).unwrap(), ["a"], "held");
        assert_eq!(walks.get(), 1);
        cache.changed();
        assert_eq!(&*cache.names(&ks, || walk("b")).unwrap(), ["b"], "stale after a change");
        assert_eq!(walks.get(), 2);
        // A walk that stopped early is answered but not kept.
        assert_eq!(&*cache.values(&ks, "job", || Ok((vec!["a".to_owned()], false))).unwrap(), ["a"]);
        assert_eq!(&*cache.values(&ks, "job", || Ok((vec!["x".to_owned()], true))).unwrap(), ["x"]);
        assert_eq!(&*cache.values(&ks, "job", || Ok((Vec::new(), false))).unwrap(), ["x"]);
        assert_eq!(cache.held_values(&ks, "job").as_deref(), Some(&["x".to_owned()][..]));
        assert!(cache.held_values(&ks, "zone").is_none());
        cache.changed();
        assert!(cache.held_values(&ks, "job").is_none() && cache.held_names(&ks).is_none(), "stale");
        assert!(cache.bytes() > 0);
    }

    #[test]
    fn a_change_during_a_walk_leaves_its_answer_unused() {
        let (_dir, ks) = keyspace("w");
        let cache = IndexCache::new(1 << 20);
        // The walk races a commit: its answer is returned but must not be reused.
        let got = cache
            .names(&ks, || {
                cache.changed();
                Ok(vec!["old".to_owned()])
            })
            .unwrap();
        assert_eq!(&*got, ["old"]);
        assert_eq!(&*cache.names(&ks, || Ok(vec!["new".to_owned()])).unwrap(), ["new"]);
    }

    #[test]
    fn selections_and_keyspaces_are_told_apart() {
        let (_dir, a) = keyspace("a");
        let (_dir2, b) = keyspace("b");
        let cache = IndexCache::new(1 << 20);
        let sel = |v: &str| Selection::new(&[Matcher::equal("job", v)]);
        let regex = Selection::new(&[Matcher::new(MatchOp::RegexMatch, "job", "x").unwrap()]);
        assert_eq!(&*cache.candidates(&a, &sel("x"), || Ok(vec![1])).unwrap(), [1]);
        assert_eq!(&*cache.candidates(&a, &sel("y"), || Ok(vec![2])).unwrap(), [2]);
        assert_eq!(&*cache.candidates(&a, &regex, || Ok(vec![3])).unwrap(), [3]);
        assert_eq!(&*cache.candidates(&b, &sel("x"), || Ok(vec![4])).unwrap(), [4]);
        assert_eq!(&*cache.candidates(&a, &sel("x"), || Ok(vec![9])).unwrap(), [1]);
        // A name ending where another begins is not the same selection.
        let ab = Selection::new(&[Matcher::equal("a", "b"), Matcher::equal("c", "")]);
        let a_bc = Selection::new(&[Matcher::equal("a", "bc"), Matcher::equal("", "")]);
        assert_ne!(selection_key(&ab), selection_key(&a_bc));
    }

    #[test]
    fn stays_within_its_budget() {
        let (_dir, ks) = keyspace("w");
        let cache = IndexCache::new(64 << 10);
        for i in 0..1_000u64 {
            let sel = Selection::new(&[Matcher::equal("i", i.to_string())]);
            cache.candidates(&ks, &sel, || Ok((0..100).collect())).unwrap();
            assert!(cache.bytes() <= 64 << 10);
        }
        // One answer over an eighth of the budget is not kept.
        let big = Selection::new(&[Matcher::equal("big", "1")]);
        cache.candidates(&ks, &big, || Ok((0..10_000).collect())).unwrap();
        let again = cache.candidates(&ks, &big, || Ok(vec![7])).unwrap();
        assert_eq!(&*again, [7]);
    }
}
