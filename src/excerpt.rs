//! Excerpts of client-supplied text for error messages and bounded stores: a megabyte-long
//! regex, query or HELP text must never come back (or be kept) whole. Cuts fall on character
//! boundaries, so an excerpt is always valid UTF-8.

/// The longest prefix of `s` of at most `max_bytes` bytes that ends on a character boundary.
pub fn cut(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` itself when it has at most `max_bytes` bytes, else its [`cut`] followed by
/// `... (<length> bytes)`.
pub fn excerpt(s: &str, max_bytes: usize) -> String {
    if s.len() <= max_bytes {
        s.to_owned()
    } else {
        format!("{}... ({} bytes)", cut(s, max_bytes), s.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(cut("abc", 5), "abc");
        assert_eq!(cut("abcdef", 3), "abc");
        assert_eq!(cut("aé", 2), "a", "é is two bytes");
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("éééé", 5), "éé... (8 bytes)");
    }
}
