//! How much memory a remote-write body decodes to, known before decoding it: one walk over the
//! body's field keys and lengths (no value is decoded, nothing is allocated) against the schema
//! of the messages in [`super::proto`]. Remote-write 1.0 and 2.0 and remote read.
//!
//! Protobuf's expansion is not bounded by the body's size. An empty `Sample` is 2 bytes on the
//! wire and 16 decoded; an empty `TimeSeries` is 2 bytes and a 96-byte struct inside a `Vec`
//! that may have doubled; and snappy turns a 3 MB body into 64 MiB of such messages. So before
//! a body goes to prost (remote-write 2.0, remote read, and 1.0 bodies the zero-copy scanner
//! leaves to prost), the write path reserves what this module computes in its memory budget
//! ([`crate::http::admission`]), refuses what does not fit, and sizes the decoded batch exactly.
//! (The scanner itself reserves its batch as it grows: it needs no walk.)
//!
//! Remote read has no write budget: a read request whose walk exceeds the body limit is refused.
//!
//! Invariant (checked against the capacities prost really allocates by the proptests in
//! `remote/tests.rs` and by the `remote_write_v1`/`_v2` fuzz targets, with [`held`]):
//! [`Footprint::prost_bytes`] is at least the heap memory the messages prost decodes from the
//! body hold: every `Vec`'s capacity as it grows by doubling from 4, every string's capacity
//! (not the old buffer while a `Vec` reallocates). Unknown fields, groups included, are skipped
//! as prost skips them. A body that is malformed part-way is counted up to where the walk
//! stops, which is no earlier than where prost stops.

use std::mem::size_of;

use super::proto;
use super::scan::{Cursor, FIXED32, FIXED64, LEN, VARINT};
use crate::histogram::{Histogram, Span};
use crate::sample::{HistogramSample, Sample};

/// What a walk found in one body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Upper bound on the heap bytes prost allocates to decode the body.
    pub prost_bytes: usize,
    /// `TimeSeries` messages.
    pub series: usize,
    /// `Sample` messages inside them.
    pub samples: usize,
    /// Bytes of the 1.0 `Label` messages: at least their canonical encoding (name, value and a
    /// separator each), which is shorter than the wire's two keys and two lengths.
    pub label_bytes: usize,
    /// `Histogram` messages inside the series.
    pub histograms: usize,
    /// At least the elements of the vectors a decoded [`Histogram`] holds (spans, bucket
    /// counts, custom bounds), all fields of either form together: a packed field counts
    /// its bytes divided by the smallest wire size of an element.
    pub histogram_elements: usize,
}

impl Footprint {
    /// Walks a remote-write 1.0 `prometheus.WriteRequest`.
    pub fn of_v1(raw: &[u8]) -> Self {
        Walk::run(raw, &V1_WRITE_REQUEST)
    }

    /// Walks a remote-read `prometheus.ReadRequest`.
    pub fn of_read_request(raw: &[u8]) -> Self {
        Walk::run(raw, &READ_REQUEST)
    }

    /// Walks a remote-write 2.0 `io.prometheus.write.v2.Request` (its label text comes from the
    /// symbol table and is not in [`Footprint::label_bytes`]).
    pub fn of_v2(raw: &[u8]) -> Self {
        Walk::run(raw, &V2_REQUEST)
    }

    /// Bytes of a [`crate::sample::PackedBatch`] holding all the body's series and samples with
    /// `label_bytes` of canonical labels, as [`crate::sample::PackedBatch::sized`] sizes it,
    /// plus its native histograms ([`Footprint::histogram_bytes`]).
    pub fn batch_bytes(&self, label_bytes: usize) -> usize {
        label_bytes
            .saturating_add(self.samples.saturating_mul(size_of::<Sample>()))
            .saturating_add(self.series.saturating_mul(size_of::<(usize, usize)>()))
            .saturating_add(self.histogram_bytes())
    }

    /// Upper bound on the bytes the body's native histograms take in a batch: the batch's
    /// vector of [`HistogramSample`]s as it grows by doubling, its per-series ends (resized to
    /// the series count, then doubled at worst), each histogram's shared allocation, and the
    /// vectors inside the histograms (every element 8 bytes: a [`Span`], an `f64`).
    pub fn histogram_bytes(&self) -> usize {
        if self.histograms == 0 {
            return 0;
        }
        const _: () = assert!(size_of::<Span>() == size_of::<f64>());
        let samples = vec_capacity(self.histograms).saturating_mul(size_of::<HistogramSample>());
        let ends = self.series.max(4).saturating_mul(2 * size_of::<usize>());
        // An `Arc<Histogram>`'s allocation: the value and two counters.
        let shared = self.histograms.saturating_mul(size_of::<Histogram>() + 2 * size_of::<usize>());
        let elements = self.histogram_elements.saturating_mul(size_of::<f64>());
        samples.saturating_add(ends).saturating_add(shared).saturating_add(elements)
    }
}

/// A message type: the fields whose decoding allocates, or that the walk counts.
struct Schema {
    fields: &'static [Field],
}

/// One field of a [`Schema`].
struct Field {
    tag: u32,
    kind: Kind,
    count: Count,
}

/// How prost stores a field.
#[derive(Clone, Copy)]
enum Kind {
    /// `Vec<M>` of a message of `size` bytes.
    Messages { schema: &'static Schema, size: usize },
    /// `Option<M>`, inside its parent. Sent twice, prost merges the second into the first, so
    /// its strings may be allocated again: its heap counts twice.
    Message(&'static Schema),
    /// A `String` or `Vec<u8>`: its bytes, in a buffer of at least 8.
    Text,
    /// `Vec<String>`.
    Texts,
    /// `Vec` of a scalar of `size` bytes, packed or not (a packed element takes at least a byte).
    Scalars { size: usize },
}

/// What a field adds to the [`Footprint`]'s counts besides memory.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Count {
    Nothing,
    Series,
    Samples,
    LabelBytes,
    Histograms,
    /// Elements of a decoded histogram's vectors; the number is the smallest wire size of one
    /// element in a packed field (1 for varints, 8 for doubles).
    HistogramElements(usize),
}

/// Most fields a [`Schema`] lists.
const MAX_FIELDS: usize = 8;

const fn field(tag: u32, kind: Kind) -> Field {
    Field { tag, kind, count: Count::Nothing }
}

const fn counted(tag: u32, kind: Kind, count: Count) -> Field {
    Field { tag, kind, count }
}

const fn messages<T>(schema: &'static Schema) -> Kind {
    Kind::Messages { schema, size: size_of::<T>() }
}

/// A message with no allocating field (its scalars live in the parent's `Vec`).
static PLAIN: Schema = Schema { fields: &[] };

static LABEL: Schema = Schema { fields: &[field(1, Kind::Text), field(2, Kind::Text)] };

static V1_EXEMPLAR: Schema = Schema { fields: &[field(1, messages::<proto::Label>(&LABEL))] };

/// `prometheus.Histogram`, also remote-write 2.0's (same fields and numbers).
static HISTOGRAM: Schema = Schema {
    fields: &[
        counted(8, messages::<proto::BucketSpan>(&PLAIN), Count::HistogramElements(1)),
        counted(9, Kind::Scalars { size: size_of::<i64>() }, Count::HistogramElements(1)),
        counted(10, Kind::Scalars { size: size_of::<f64>() }, Count::HistogramElements(8)),
        counted(11, messages::<proto::BucketSpan>(&PLAIN), Count::HistogramElements(1)),
        counted(12, Kind::Scalars { size: size_of::<i64>() }, Count::HistogramElements(1)),
        counted(13, Kind::Scalars { size: size_of::<f64>() }, Count::HistogramElements(8)),
        counted(16, Kind::Scalars { size: size_of::<f64>() }, Count::HistogramElements(8)),
    ],
};

static V1_TIME_SERIES: Schema = Schema {
    fields: &[
        counted(1, messages::<proto::Label>(&LABEL), Count::LabelBytes),
        counted(2, messages::<proto::Sample>(&PLAIN), Count::Samples),
        field(3, messages::<proto::Exemplar>(&V1_EXEMPLAR)),
        counted(4, messages::<proto::Histogram>(&HISTOGRAM), Count::Histograms),
    ],
};

static V1_METADATA: Schema = Schema { fields: &[field(2, Kind::Text), field(4, Kind::Text), field(5, Kind::Text)] };

static V1_WRITE_REQUEST: Schema = Schema {
    fields: &[
        counted(1, messages::<proto::TimeSeries>(&V1_TIME_SERIES), Count::Series),
        field(3, messages::<proto::MetricMetadata>(&V1_METADATA)),
    ],
};

const REFS: Kind = Kind::Scalars { size: size_of::<u32>() };

static V2_EXEMPLAR: Schema = Schema { fields: &[field(1, REFS)] };

static V2_TIME_SERIES: Schema = Schema {
    fields: &[
        field(1, REFS),
        counted(2, messages::<proto::Sample>(&PLAIN), Count::Samples),
        counted(3, messages::<proto::v2::Histogram>(&HISTOGRAM), Count::Histograms),
        field(4, messages::<proto::v2::Exemplar>(&V2_EXEMPLAR)),
    ],
};

static V2_REQUEST: Schema = Schema {
    fields: &[field(4, Kind::Texts), counted(5, messages::<proto::v2::TimeSeries>(&V2_TIME_SERIES), Count::Series)],
};

static LABEL_MATCHER: Schema = Schema { fields: &[field(2, Kind::Text), field(3, Kind::Text)] };

static READ_HINTS: Schema = Schema { fields: &[field(2, Kind::Text), field(5, Kind::Texts)] };

static QUERY: Schema = Schema {
    fields: &[field(3, messages::<proto::LabelMatcher>(&LABEL_MATCHER)), field(4, Kind::Message(&READ_HINTS))],
};

static READ_REQUEST: Schema = Schema {
    fields: &[field(1, messages::<proto::Query>(&QUERY)), field(2, Kind::Scalars { size: size_of::<i32>() })],
};

/// The running totals of one walk.
#[derive(Default)]
struct Walk {
    out: Footprint,
}

impl Walk {
    fn run(raw: &[u8], schema: &Schema) -> Footprint {
        let mut walk = Self::default();
        // A malformed body stops the walk where prost stops (or later): what was counted is
        // what prost can have allocated.
        let _ = walk.message(raw, schema);
        walk.out
    }

    /// Walks one message; `None` where it is malformed (after counting what came before).
    fn message(&mut self, src: &[u8], schema: &Schema) -> Option<()> {
        // Per field: elements of its `Vec`, or the capacity of its string.
        let mut held = [0usize; MAX_FIELDS];
        let walked = self.fields(src, schema, &mut held);
        for (field, &n) in schema.fields.iter().zip(&held) {
            let elem = match field.kind {
                Kind::Messages { size, .. } => size,
                Kind::Texts => size_of::<String>(),
                Kind::Scalars { size } => size,
                Kind::Text | Kind::Message(_) => continue,
            };
            self.add(elem.saturating_mul(vec_capacity(n)));
        }
        walked
    }

    fn fields(&mut self, src: &[u8], schema: &Schema, held: &mut [usize; MAX_FIELDS]) -> Option<()> {
        let mut c = Cursor { src };
        while !c.is_empty() {
            let (tag, wire) = c.key()?;
            let Some((i, field)) = schema.fields.iter().enumerate().find(|(_, f)| f.tag == tag) else {
                skip_unknown(&mut c, tag, wire)?;
                continue;
            };
            let slot = held.get_mut(i)?;
            match (field.kind, wire) {
                (Kind::Messages { schema, .. }, LEN) => {
                    let body = c.bytes()?;
                    *slot += 1;
                    match field.count {
                        Count::Series => self.out.series += 1,
                        Count::Samples => self.out.samples += 1,
                        Count::LabelBytes => self.out.label_bytes += body.len(),
                        Count::Histograms => self.out.histograms += 1,
                        Count::HistogramElements(_) => self.out.histogram_elements += 1,
                        Count::Nothing => {}
                    }
                    self.message(body, schema)?;
                }
                (Kind::Message(schema), LEN) => {
                    let before = self.out.prost_bytes;
                    self.message(c.bytes()?, schema)?;
                    self.add(self.out.prost_bytes - before);
                }
                (Kind::Text, LEN) => {
                    // prost clears the string and reserves the new length: a first value gets
                    // a buffer of max(len, 8), a later longer one max(2 * cap, len).
                    let len = c.bytes()?.len();
                    let cap = match *slot {
                        0 => len.max(8),
                        cap if len > cap => len.max(cap.saturating_mul(2)),
                        cap => cap,
                    };
                    self.add(cap.saturating_sub(*slot));
                    *slot = cap;
                }
                (Kind::Texts, LEN) => {
                    let len = c.bytes()?.len();
                    *slot += 1;
                    self.add(len.max(8));
                }
                (Kind::Scalars { .. }, LEN) => {
                    let len = c.bytes()?.len();
                    *slot += len;
                    if let Count::HistogramElements(min_wire) = field.count {
                        self.out.histogram_elements += len.div_ceil(min_wire.max(1));
                    }
                }
                (Kind::Scalars { .. }, VARINT | FIXED64 | FIXED32) => {
                    *slot += 1;
                    if let Count::HistogramElements(_) = field.count {
                        self.out.histogram_elements += 1;
                    }
                    c.skip(wire)?;
                }
                // prost rejects a known field with another wire type.
                _ => return None,
            }
        }
        Some(())
    }

    fn add(&mut self, bytes: usize) {
        self.out.prost_bytes = self.out.prost_bytes.saturating_add(bytes);
    }
}

/// Protobuf's group wire types, which prost skips in unknown fields.
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
/// How deep prost nests groups before it gives up.
const MAX_GROUP_DEPTH: usize = 100;

/// Skips an unknown field as prost does: a group (deprecated, but prost still skips it) up to
/// its matching end, through nested groups. `None` where prost fails.
fn skip_unknown(c: &mut Cursor<'_>, tag: u32, wire: u8) -> Option<()> {
    if wire != START_GROUP {
        return c.skip(wire);
    }
    let mut open = [0u32; MAX_GROUP_DEPTH];
    let mut depth = 1;
    *open.first_mut()? = tag;
    while depth > 0 {
        let (t, w) = c.key()?;
        match w {
            END_GROUP => {
                (*open.get(depth - 1)? == t).then_some(())?;
                depth -= 1;
            }
            START_GROUP => {
                *open.get_mut(depth)? = t;
                depth += 1;
            }
            _ => c.skip(w)?,
        }
    }
    Some(())
}

/// The capacity of a `Vec` grown one push at a time to `n` elements (elements up to 1 KiB:
/// the first allocation holds 4, each later one doubles). Capacity reserved ahead by a packed
/// decoder is within this too, since `n` counts a packed field's bytes.
fn vec_capacity(n: usize) -> usize {
    match n {
        0 => 0,
        1..=4 => 4,
        n => n.checked_next_power_of_two().unwrap_or(usize::MAX),
    }
}

/// Heap bytes decoded prost messages hold (every `Vec`'s and `String`'s capacity): what a
/// [`Footprint`] must bound. For the proptests and the fuzz targets.
pub mod held {
    use crate::remote::proto::{self, v2};
    use prost::Message;

    /// What prost holds after decoding `raw` as a remote-write 1.0 request, if it decodes.
    pub fn decoding_v1(raw: &[u8]) -> Option<usize> {
        proto::WriteRequest::decode(raw).ok().map(|r| v1(&r))
    }

    /// What prost holds after decoding `raw` as a remote-write 2.0 request, if it decodes.
    pub fn decoding_v2(raw: &[u8]) -> Option<usize> {
        v2::Request::decode(raw).ok().map(|r| v2(&r))
    }

    fn vec<T>(v: &Vec<T>) -> usize {
        v.capacity() * std::mem::size_of::<T>()
    }

    fn label(l: &proto::Label) -> usize {
        l.name.capacity() + l.value.capacity()
    }

    fn labels(l: &Vec<proto::Label>) -> usize {
        vec(l) + l.iter().map(label).sum::<usize>()
    }

    fn histogram(h: &proto::Histogram) -> usize {
        vec(&h.negative_spans)
            + vec(&h.negative_deltas)
            + vec(&h.negative_counts)
            + vec(&h.positive_spans)
            + vec(&h.positive_deltas)
            + vec(&h.positive_counts)
            + vec(&h.custom_values)
    }

    /// Of a remote-write 1.0 request.
    pub fn v1(r: &proto::WriteRequest) -> usize {
        let series: usize = r
            .timeseries
            .iter()
            .map(|t| {
                labels(&t.labels)
                    + vec(&t.samples)
                    + vec(&t.exemplars)
                    + t.exemplars.iter().map(|e| labels(&e.labels)).sum::<usize>()
                    + vec(&t.histograms)
                    + t.histograms.iter().map(histogram).sum::<usize>()
            })
            .sum();
        let metadata: usize =
            r.metadata.iter().map(|m| m.metric_family_name.capacity() + m.help.capacity() + m.unit.capacity()).sum();
        vec(&r.timeseries) + series + vec(&r.metadata) + metadata
    }

    /// Of a remote-write 2.0 request.
    pub fn v2(r: &v2::Request) -> usize {
        let series: usize = r
            .timeseries
            .iter()
            .map(|t| {
                vec(&t.labels_refs)
                    + vec(&t.samples)
                    + vec(&t.exemplars)
                    + t.exemplars.iter().map(|e| vec(&e.labels_refs)).sum::<usize>()
                    + vec(&t.histograms)
                    + t.histograms.iter().map(histogram).sum::<usize>()
            })
            .sum();
        vec(&r.symbols) + r.symbols.iter().map(String::capacity).sum::<usize>() + vec(&r.timeseries) + series
    }

    /// Of a remote-read request.
    pub fn read(r: &proto::ReadRequest) -> usize {
        let queries: usize = r
            .queries
            .iter()
            .map(|q| {
                vec(&q.matchers)
                    + q.matchers.iter().map(|m| m.name.capacity() + m.value.capacity()).sum::<usize>()
                    + q.hints.as_ref().map_or(0, |h| {
                        h.func.capacity() + vec(&h.grouping) + h.grouping.iter().map(String::capacity).sum::<usize>()
                    })
            })
            .sum();
        vec(&r.queries) + queries + vec(&r.accepted_response_types)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_fit_the_field_table() {
        for s in [
            &V1_WRITE_REQUEST,
            &V1_TIME_SERIES,
            &V1_METADATA,
            &HISTOGRAM,
            &V2_REQUEST,
            &V2_TIME_SERIES,
            &READ_REQUEST,
            &QUERY,
        ] {
            assert!(s.fields.len() <= MAX_FIELDS);
        }
    }

    #[test]
    fn empty_messages_are_counted() {
        // 1,000 empty TimeSeries: 2 bytes each on the wire.
        let raw: Vec<u8> = [0x0a, 0x00].repeat(1000);
        let f = Footprint::of_v1(&raw);
        assert_eq!(f.series, 1000);
        assert_eq!(f.prost_bytes, 1024 * size_of::<proto::TimeSeries>());
        // A truncated body counts what came before the cut.
        let f = Footprint::of_v1(&[0x0a, 0x00, 0x0a, 0x05, 0x12]);
        assert_eq!(f.series, 1);
    }

    #[test]
    fn vec_capacity_doubles_from_four() {
        assert_eq!([0, 1, 4, 5, 8, 9, 1000].map(vec_capacity), [0, 4, 4, 8, 8, 16, 1024]);
    }
}
