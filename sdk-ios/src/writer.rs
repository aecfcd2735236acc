//! A JSON writer into a fixed buffer: no allocation, no locks, so it runs inside a signal
//! handler. Output that does not fit is cut; a caller that must end with a valid document
//! reserves room for its end ([`Writer::reserve`]) and takes back a part that did not fit
//! whole ([`Writer::mark`], [`Writer::rewind`]), which marks the output truncated.

/// A fixed-capacity byte buffer with JSON helpers.
pub struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
    /// Writes stop here: the buffer's length less what is reserved.
    end: usize,
    overflow: bool,
    truncated: bool,
}

impl<'a> Writer<'a> {
    /// Writes into `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        let end = buf.len();
        Writer {
            buf,
            len: 0,
            end,
            overflow: false,
            truncated: false,
        }
    }

    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Whether some output did not fit (since the last [`Writer::rewind`]).
    pub fn overflowed(&self) -> bool {
        self.overflow
    }

    /// Whether something was left out: output did not fit, or was taken back.
    pub fn truncated(&self) -> bool {
        self.truncated || self.overflow
    }

    /// Keeps the last `bytes` bytes of the buffer out of reach of later writes, until
    /// [`Writer::release`] (room for the document's end).
    pub fn reserve(&mut self, bytes: usize) {
        self.end = self.buf.len().saturating_sub(bytes).max(self.len);
    }

    /// Gives the reserved bytes back to the writes.
    pub fn release(&mut self) {
        self.end = self.buf.len();
    }

    /// Bytes left for writes (the reserved ones not counted).
    pub fn room(&self) -> usize {
        self.end.saturating_sub(self.len)
    }

    /// Where the output ends now, to [`Writer::rewind`] to.
    pub fn mark(&self) -> usize {
        self.len
    }

    /// Takes back everything written after `mark` (a part that did not fit whole): the output
    /// is marked truncated, and no longer overflowed.
    pub fn rewind(&mut self, mark: usize) {
        self.len = mark.min(self.len);
        self.overflow = false;
        self.truncated = true;
    }

    /// Raw bytes.
    pub fn raw(&mut self, bytes: &[u8]) {
        let room = self.end.saturating_sub(self.len);
        let n = bytes.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        if n < bytes.len() {
            self.overflow = true;
        }
    }

    /// A JSON string literal (quotes, escapes; control bytes as `\u00XX`). Bytes that are not
    /// UTF-8 (a name cut inside a character) are written as U+FFFD, so the document stays
    /// valid JSON. No allocation.
    pub fn string(&mut self, s: &[u8]) {
        self.raw(b"\"");
        let mut rest = s;
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    self.escaped(valid.as_bytes());
                    break;
                }
                Err(e) => {
                    let (valid, bad) = rest.split_at(e.valid_up_to());
                    self.escaped(valid);
                    self.raw("\u{fffd}".as_bytes());
                    rest = &bad[e.error_len().unwrap_or(bad.len())..];
                }
            }
        }
        self.raw(b"\"");
    }

    /// `s` (valid UTF-8) with JSON's escapes.
    fn escaped(&mut self, s: &[u8]) {
        for &b in s {
            match b {
                b'"' => self.raw(b"\\\""),
                b'\\' => self.raw(b"\\\\"),
                b'\n' => self.raw(b"\\n"),
                b'\r' => self.raw(b"\\r"),
                b'\t' => self.raw(b"\\t"),
                0..=0x1f => {
                    self.raw(b"\\u00");
                    self.raw(&[hex_digit(b >> 4), hex_digit(b & 0xf)]);
                }
                _ => self.raw(&[b]),
            }
        }
    }

    /// `"0x…"`: an address as a JSON string in lowercase hex.
    pub fn hex(&mut self, value: u64) {
        let mut digits = [0u8; 16];
        let mut n = 0;
        let mut v = value;
        loop {
            digits[n] = hex_digit((v & 0xf) as u8);
            n += 1;
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        self.raw(b"\"0x");
        for i in (0..n).rev() {
            self.raw(&[digits[i]]);
        }
        self.raw(b"\"");
    }

    /// A decimal integer.
    pub fn dec(&mut self, value: u64) {
        let mut digits = [0u8; 20];
        let mut n = 0;
        let mut v = value;
        loop {
            digits[n] = b'0' + (v % 10) as u8;
            n += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for i in (0..n).rev() {
            self.raw(&[digits[i]]);
        }
    }

    /// `[{"instruction_addr":"0x…"},…]`: a report's frame list, innermost first.
    pub fn frames(&mut self, addresses: &[u64]) {
        self.raw(b"[");
        for (i, addr) in addresses.iter().enumerate() {
            if i > 0 {
                self.raw(b",");
            }
            self.raw(b"{");
            self.key("instruction_addr", true);
            self.hex(*addr);
            self.raw(b"}");
        }
        self.raw(b"]");
    }

    /// `"key":` (with a leading comma unless `first`).
    pub fn key(&mut self, key: &str, first: bool) {
        if !first {
            self.raw(b",");
        }
        self.string(key.as_bytes());
        self.raw(b":");
    }
}

fn hex_digit(n: u8) -> u8 {
    b"0123456789abcdef"[(n & 0xf) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_valid_json_and_cuts_on_overflow() {
        let mut buf = [0u8; 128];
        let mut w = Writer::new(&mut buf);
        w.raw(b"{");
        w.key("a", true);
        w.hex(0x1007da384);
        w.key("b\"", false);
        w.dec(18446744073709551615);
        w.key("c", false);
        w.string(b"x\n\x01");
        w.raw(b"}");
        assert_eq!(
            std::str::from_utf8(w.as_bytes()).unwrap(),
            r#"{"a":"0x1007da384","b\"":18446744073709551615,"c":"x\n\u0001"}"#
        );
        let mut small = [0u8; 4];
        let mut w = Writer::new(&mut small);
        w.raw(b"hello");
        assert!(w.overflowed());
        assert_eq!(w.as_bytes(), b"hell");
    }

    #[test]
    fn bytes_that_are_not_utf8_become_replacement_characters() {
        let mut buf = [0u8; 64];
        let mut w = Writer::new(&mut buf);
        // "é" cut after its first byte, then a stray continuation byte inside.
        w.string(b"caf\xc3");
        w.string(b"a\x80b");
        assert_eq!(
            std::str::from_utf8(w.as_bytes()).unwrap(),
            "\"caf\u{fffd}\"\"a\u{fffd}b\""
        );
    }

    #[test]
    fn a_reserved_end_and_a_part_taken_back_keep_the_document_whole() {
        let mut buf = [0u8; 16];
        let mut w = Writer::new(&mut buf);
        w.reserve(2);
        w.raw(b"[1");
        let mark = w.mark();
        w.raw(b",22222222222222");
        assert!(w.overflowed());
        w.rewind(mark);
        assert!(!w.overflowed() && w.truncated());
        w.release();
        w.raw(b"]");
        assert_eq!(w.as_bytes(), b"[1]");
    }
}
