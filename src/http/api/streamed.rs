//! Success envelopes whose data array is written piece by piece as the client reads it: a
//! large query or series answer is never held as one string beside the values it is made of,
//! and each element is dropped once written.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

/// Bytes written before a piece is handed to the connection.
pub const PIECE_BYTES: usize = 64 << 10;

/// `head`, the elements of `items` (each written by `write`) separated by commas, then `tail`,
/// in pieces of about [`PIECE_BYTES`].
pub struct ArrayPieces<T, F> {
    head: Option<String>,
    items: std::vec::IntoIter<T>,
    write: F,
    tail: Option<String>,
    first: bool,
}

impl<T, F: FnMut(&mut String, T)> ArrayPieces<T, F> {
    /// The pieces of `head` + `items` + `tail`.
    pub fn new(head: String, items: Vec<T>, write: F, tail: String) -> Self {
        Self { head: Some(head), items: items.into_iter(), write, tail: Some(tail), first: true }
    }
}

impl<T, F: FnMut(&mut String, T)> Iterator for ArrayPieces<T, F> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let mut out = self.head.take().unwrap_or_default();
        out.reserve(PIECE_BYTES.saturating_sub(out.len()));
        for item in self.items.by_ref() {
            if !self.first {
                out.push(',');
            }
            self.first = false;
            (self.write)(&mut out, item);
            if out.len() >= PIECE_BYTES {
                return Some(Bytes::from(out));
            }
        }
        if let Some(tail) = self.tail.take() {
            out.push_str(&tail);
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
}

impl<T, F> ArrayPieces<T, F> {
    /// True once the last piece (the one holding the tail) has been returned.
    fn is_done(&self) -> bool {
        self.tail.is_none()
    }
}

/// A 200 JSON response of the pieces: a document that fits in its first piece (most answers)
/// goes out whole, with a `Content-Length`, in one write; a longer one is streamed, chunked,
/// piece by piece as the client reads.
pub fn json_response<T, F>(mut pieces: ArrayPieces<T, F>) -> Response
where
    T: Send + 'static,
    F: FnMut(&mut String, T) + Send + 'static,
{
    let first = pieces.next().unwrap_or_default();
    if pieces.is_done() {
        return ([(header::CONTENT_TYPE, "application/json")], first).into_response();
    }
    let stream = futures_util::stream::iter(std::iter::once(first).chain(pieces).map(Ok::<_, Infallible>));
    ([(header::CONTENT_TYPE, "application/json")], Body::from_stream(stream)).into_response()
}

/// `,"warnings":[...]` when there are any, for the end of an envelope.
pub fn warnings_json(key: &str, items: &[String]) -> String {
    if items.is_empty() {
        return String::new();
    }
    format!(",\"{key}\":{}", serde_json::Value::from(items.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_join_to_the_whole_document() {
        let write = |out: &mut String, n: u32| out.push_str(&n.to_string());
        let whole: Vec<u8> = ArrayPieces::new("[".into(), vec![], write, "]".into()).flat_map(|b| b.to_vec()).collect();
        assert_eq!(whole, b"[]");
        let items: Vec<u32> = (0..50_000).collect();
        let pieces: Vec<Bytes> = ArrayPieces::new("{\"a\":[".into(), items, write, "]}".into()).collect();
        assert!(pieces.len() > 3, "{} pieces", pieces.len());
        assert!(pieces.iter().all(|p| p.len() < PIECE_BYTES + 16));
        let text = String::from_utf8(pieces.concat()).unwrap();
        let parsed: serde_json::Value = text.parse().unwrap();
        assert_eq!(parsed["a"].as_array().map(Vec::len), Some(50_000));
        assert_eq!(parsed["a"][49_999], 49_999);
    }

    #[tokio::test]
    async fn small_documents_go_out_whole_and_large_ones_chunked() {
        use http_body_util::BodyExt;
        // hyper writes `Content-Length` from an exact size hint, `Transfer-Encoding: chunked` otherwise.
        use axum::body::HttpBody;
        let write = |out: &mut String, n: u32| out.push_str(&n.to_string());
        let small = json_response(ArrayPieces::new("[".into(), vec![1, 2, 3], write, "]".into()));
        assert_eq!(small.body().size_hint().exact(), Some(7));
        assert_eq!(small.into_body().collect().await.unwrap().to_bytes(), "[1,2,3]");
        let items: Vec<u32> = (0..50_000).collect();
        let large = json_response(ArrayPieces::new("[".into(), items, write, "]".into()));
        assert_eq!(large.body().size_hint().exact(), None);
        let text = large.into_body().collect().await.unwrap().to_bytes();
        let parsed: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(parsed.as_array().map(Vec::len), Some(50_000));
    }
}
