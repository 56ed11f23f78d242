//! The DCFG-trace edge-id sequence strings (spec section 3.7.1): bit strings in modified
//! Base64 (`A`-`Z`, `a`-`z`, `0`-`9`, `+`, `-`; six bits a character, most significant
//! first), with consecutive repeats `(N*...)` and dictionary references `<key>`, both of
//! which nest. Decoding expands them lazily, so a string that repeats a dictionary entry a
//! billion times decodes in memory proportional to its text, not its expansion.

use std::collections::HashMap;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+-";

/// Why a sequence string cannot be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SeqError {
    #[error("character {0:?} at {1} is not part of an edge-id sequence")]
    BadChar(char, usize),
    #[error("unbalanced '(' or missing '*' in a repeat at {0}")]
    BadRepeat(usize),
    #[error("dictionary reference <{0}> is not in the STRING_DICTIONARY")]
    UnknownKey(String),
    #[error("unterminated dictionary reference at {0}")]
    Unterminated(usize),
    #[error("repeats and dictionary references nest more than {0} deep (a circular reference?)")]
    TooDeep(usize),
    #[error("the repeat at {0} repeats nothing (a zero count or an empty body)")]
    EmptyRepeat(usize),
    #[error("dictionary entry <{0}> is empty")]
    EmptyEntry(String),
    #[error("the sequence ends after {0} bits, before the edges it must hold")]
    Short(u64),
}

/// The value of a modified Base64 character.
pub fn sextet(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'-' => Some(63),
        _ => None,
    }
}

/// Repeats and dictionary references nested deeper than this are refused (a reference
/// cycle, or text that would cost its length again at each level).
const MAX_DEPTH: usize = 64;

/// Appends bits and renders them as modified Base64.
#[derive(Default, Debug)]
pub struct BitWriter {
    out: Vec<u8>,
    /// Pending bits, the oldest highest; `n` of them (fewer than 6 between calls).
    acc: u64,
    n: u32,
}

impl BitWriter {
    /// Appends the low `len` (at most 32) bits of `code`, most significant first.
    #[inline]
    pub fn push(&mut self, code: u32, len: u8) {
        let len = len as u32;
        self.acc = self.acc << len | (code as u64 & ((1u64 << len) - 1));
        self.n += len;
        while self.n >= 6 {
            self.n -= 6;
            self.out.push(ALPHABET[((self.acc >> self.n) & 63) as usize]);
        }
        self.acc &= (1u64 << self.n) - 1;
    }

    /// The characters, the last padded with zero bits.
    pub fn finish(mut self) -> String {
        if self.n > 0 {
            self.out.push(ALPHABET[((self.acc << (6 - self.n)) & 63) as usize]);
        }
        String::from_utf8(self.out).expect("the alphabet is ASCII")
    }
}

/// Shortens a Base64 string with `(N*...)` wherever a run of a repeated substring (of up
/// to `MAX_UNIT` characters) is longer than the repeat's notation.
pub fn compress_repeats(s: &str) -> String {
    const MAX_UNIT: usize = 8;
    let b = s.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(s.len() / 2);
    let mut i = 0;
    while i < b.len() {
        // Most places repeat nothing: the units whose first character recurs here, found
        // sixteen at a time (a byte of `x` is zero where b[i + 1 + k] == b[i]).
        if i + 17 <= b.len() {
            let mut w = [0u8; 16];
            w.copy_from_slice(&b[i + 1..i + 17]);
            let x = u128::from_le_bytes(w) ^ (b[i] as u128 * 0x0101_0101_0101_0101_0101_0101_0101_0101);
            let zero = x.wrapping_sub(0x0101_0101_0101_0101_0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080_8080_8080_8080_8080;
            if zero == 0 {
                out.push(b[i]);
                i += 1;
                continue;
            }
        }
        // The unit whose run saves most characters here.
        let mut best: Option<(usize, usize, usize)> = None; // (saving, unit, count)
        for unit in 1..=MAX_UNIT.min((b.len() - i) / 2) {
            // Most places repeat nothing: one byte rules a unit out. A run pays only if it
            // repeats at least five characters (a unit plus four of notation), so five bytes
            // equal a unit apart are needed too.
            if b[i + unit] != b[i] {
                continue;
            }
            if i + unit + 8 <= b.len() {
                let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"));
                if (word(i) ^ word(i + unit)) & 0xff_ffff_ffff != 0 {
                    continue;
                }
            }
            let mut count = 1;
            while i + (count + 1) * unit <= b.len() && (0..unit).all(|k| b[i + count * unit + k] == b[i + k]) {
                count += 1;
            }
            if count < 2 {
                continue;
            }
            let plain = count * unit;
            let coded = unit + 3 + count.ilog10() as usize + 1; // "(" digits "*" unit ")"
            if plain > coded && best.is_none_or(|(s, _, _)| plain - coded > s) {
                best = Some((plain - coded, unit, count));
            }
            // A long run of one character: longer units would only recount it.
            if unit == 1 && count > 2 * MAX_UNIT {
                break;
            }
        }
        match best {
            Some((_, unit, count)) => {
                out.push(b'(');
                out.extend_from_slice(count.to_string().as_bytes());
                out.push(b'*');
                out.extend_from_slice(&b[i..i + unit]);
                out.push(b')');
                i += unit * count;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).expect("made of the input's ASCII and ASCII notation")
}

/// What the reader is expanding: a piece of text and how often it is still to be read.
struct Frame<'a> {
    text: &'a [u8],
    pos: usize,
    /// Passes over `text` still to make after this one.
    again: u64,
    start: usize,
    depth: usize,
}

/// Reads the bits of a sequence string, expanding repeats and dictionary references as it
/// goes (spec 3.7.1).
pub struct BitReader<'a> {
    dict: &'a HashMap<String, String>,
    stack: Vec<Frame<'a>>,
    acc: u8,
    left: u8,
    bits: u64,
}

impl<'a> BitReader<'a> {
    pub fn new(s: &'a str, dict: &'a HashMap<String, String>) -> Self {
        BitReader { dict, stack: vec![Frame { text: s.as_bytes(), pos: 0, again: 0, start: 0, depth: 0 }], acc: 0, left: 0, bits: 0 }
    }

    /// The next Base64 character's value, or None at the end.
    fn next_sextet(&mut self) -> Result<Option<u8>, SeqError> {
        loop {
            let Some(f) = self.stack.last_mut() else { return Ok(None) };
            if f.pos >= f.text.len() {
                if f.again > 0 {
                    f.again -= 1;
                    f.pos = f.start;
                } else {
                    self.stack.pop();
                }
                continue;
            }
            let c = f.text[f.pos];
            let at = f.pos;
            match c {
                b'(' => {
                    let digits = f.text[at + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                    if digits == 0 || f.text.get(at + 1 + digits) != Some(&b'*') {
                        return Err(SeqError::BadRepeat(at));
                    }
                    let n: u64 = std::str::from_utf8(&f.text[at + 1..at + 1 + digits])
                        .ok()
                        .and_then(|d| d.parse().ok())
                        .ok_or(SeqError::BadRepeat(at))?;
                    let body = at + 2 + digits;
                    let mut level = 1;
                    let mut end = body;
                    while end < f.text.len() {
                        match f.text[end] {
                            b'(' => level += 1,
                            b')' => {
                                level -= 1;
                                if level == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        end += 1;
                    }
                    if level != 0 {
                        return Err(SeqError::BadRepeat(at));
                    }
                    // Every element yields a character: a repeat of nothing would loop
                    // (or nest) without reading any.
                    if n == 0 || end == body {
                        return Err(SeqError::EmptyRepeat(at));
                    }
                    let (text, depth) = (f.text, f.depth + 1);
                    if depth > MAX_DEPTH {
                        return Err(SeqError::TooDeep(MAX_DEPTH));
                    }
                    f.pos = end + 1;
                    self.stack.push(Frame { text: &text[..end], pos: body, again: n - 1, start: body, depth });
                }
                b'<' => {
                    let len = f.text[at + 1..].iter().position(|&c| c == b'>').ok_or(SeqError::Unterminated(at))?;
                    let key = String::from_utf8_lossy(&f.text[at + 1..at + 1 + len]).into_owned();
                    f.pos = at + 2 + len;
                    let depth = f.depth + 1;
                    if depth > MAX_DEPTH {
                        return Err(SeqError::TooDeep(MAX_DEPTH));
                    }
                    let dict: &'a HashMap<String, String> = self.dict;
                    let value = dict.get(&key).ok_or_else(|| SeqError::UnknownKey(key.clone()))?;
                    if value.is_empty() {
                        return Err(SeqError::EmptyEntry(key));
                    }
                    self.stack.push(Frame { text: value.as_bytes(), pos: 0, again: 0, start: 0, depth });
                }
                _ => {
                    f.pos += 1;
                    return sextet(c).map(Some).ok_or(SeqError::BadChar(c as char, at));
                }
            }
        }
    }

    /// The next bit.
    #[inline]
    pub fn bit(&mut self) -> Result<bool, SeqError> {
        if self.left == 0 {
            self.acc = self.next_sextet()?.ok_or(SeqError::Short(self.bits))?;
            self.left = 6;
        }
        self.left -= 1;
        self.bits += 1;
        Ok((self.acc >> self.left) & 1 == 1)
    }

    /// The expanded characters of the whole string (for tests and small strings).
    pub fn expand(mut self) -> Result<String, SeqError> {
        let mut s = String::new();
        while let Some(v) = self.next_sextet()? {
            s.push(ALPHABET[v as usize] as char);
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dict() -> HashMap<String, String> {
        [("a", "bks2hD7kB+KDk87(6*AB)Aw3ABD9"), ("b", "KkDk123(42*(25*a))45690D<a>7Fjdkpm")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expand(s: &str) -> String {
        BitReader::new(s, &dict()).expand().unwrap()
    }

    /// The spec's examples, section 3.7.1.
    #[test]
    fn spec_examples() {
        // "C+" encodes the twelve bits 0b000010111110.
        let empty = HashMap::new();
        let mut r = BitReader::new("C+", &empty);
        let bits: String = (0..12).map(|_| if r.bit().unwrap() { '1' } else { '0' }).collect();
        assert_eq!(bits, "000010111110");
        assert_eq!(r.bit(), Err(SeqError::Short(12)));
        assert_eq!(expand("A(4*BC)D"), "ABCBCBCBCD");
        assert_eq!(expand("123(2*(6*a)b)456"), "123aaaaaabaaaaaab456");
        assert_eq!(expand("A<a>B"), "Abks2hD7kB+KDk87ABABABABABABAw3ABD9B");
        let a = "bks2hD7kB+KDk87ABABABABABABAw3ABD9";
        assert_eq!(expand("(2*A<a>B)"), format!("A{a}BA{a}B"));
        let b = format!("KkDk123{}45690D{a}7Fjdkpm", "a".repeat(42 * 25));
        assert_eq!(expand("A<b>B"), format!("A{b}B"));
    }

    #[test]
    fn errors_are_named() {
        let d = dict();
        assert_eq!(BitReader::new("A<zz>", &d).expand(), Err(SeqError::UnknownKey("zz".into())));
        assert_eq!(BitReader::new("A(3BC)", &d).expand(), Err(SeqError::BadRepeat(1)));
        assert_eq!(BitReader::new("A(3*BC", &d).expand(), Err(SeqError::BadRepeat(1)));
        assert_eq!(BitReader::new("A/", &d).expand(), Err(SeqError::BadChar('/', 1)));
        let cyclic: HashMap<String, String> = [("x".to_string(), "A<x>".to_string())].into_iter().collect();
        assert_eq!(BitReader::new("<x>", &cyclic).expand(), Err(SeqError::TooDeep(MAX_DEPTH)));
    }

    /// Runs `f` on another thread; panics if it has not returned within ten seconds.
    fn within_seconds<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("hung: a loop made no progress")
    }

    /// Repeats of nothing (a zero count, an empty body or an empty entry) and nesting
    /// without end are refused where they are read, not expanded without progress.
    #[test]
    fn repeats_of_nothing_are_refused() {
        let read = |s: &'static str, d: &'static [(&'static str, &'static str)]| {
            within_seconds(move || {
                let dict: HashMap<String, String> = d.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                BitReader::new(s, &dict).expand()
            })
        };
        assert_eq!(read("A(18446744073709551615*)", &[]), Err(SeqError::EmptyRepeat(1)));
        assert_eq!(read("(18446744073709551615*(0*A))", &[]), Err(SeqError::EmptyRepeat(22)));
        assert_eq!(read("(18446744073709551615*<e>)", &[("e", "")]), Err(SeqError::EmptyEntry("e".into())));
        // Nesting is bounded, repeats and references alike.
        let deep: &'static str = Box::leak(format!("{}A{}", "(18446744073709551615*".repeat(100), ")".repeat(100)).into_boxed_str());
        assert_eq!(read(deep, &[]), Err(SeqError::TooDeep(MAX_DEPTH)));
        // A reader stops where its bits do, whatever the counts say.
        let ones = within_seconds(|| {
            let d = HashMap::new();
            let mut r = BitReader::new("(18446744073709551615*(18446744073709551615*AB))", &d);
            (0..1000).map(|_| r.bit().unwrap() as u32).sum::<u32>()
        });
        // "AB" is 000000 000001: one bit in twelve is set.
        assert_eq!(ones, 1000 / 12);
    }

    /// Written bits read back, through repeat compression, for random and repetitive input.
    #[test]
    fn round_trip() {
        let mut seed = 7u64;
        for round in 0..200 {
            let mut w = BitWriter::default();
            let mut want = Vec::new();
            let n = (round * 37) % 500 + 1;
            for k in 0..n {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let (code, len) = if round % 2 == 0 { ((seed >> 33) as u32, (seed >> 59) as u8 % 9) } else { ((k % 3) as u32, 2) };
                w.push(code, len);
                want.extend((0..len).rev().map(|b| (code >> b) & 1 == 1));
            }
            let s = compress_repeats(&w.finish());
            let d = HashMap::new();
            let mut r = BitReader::new(&s, &d);
            let got: Vec<bool> = (0..want.len()).map(|_| r.bit().unwrap()).collect();
            assert_eq!(got, want, "round {round}: {s}");
        }
        assert_eq!(compress_repeats("AAAAAAAAAAB"), "(10*A)B");
        assert_eq!(compress_repeats("ABABABABABAB"), "(6*AB)");
        assert_eq!(compress_repeats("AAB"), "AAB");
    }
}

/// A STRING_DICTIONARY chosen from sample sequence strings: the repeat groups `(N*...)`
/// that recur often enough that `<key>` in their place, plus their entry, is shorter.
#[derive(Debug, Default)]
pub struct Dictionary {
    /// Group text -> key.
    keys: HashMap<String, String>,
}

/// The `i`-th dictionary key: `A`, ..., `-`, then `AA`, `AB`, ... (the key alphabet).
fn key_name(mut i: usize) -> String {
    let mut k = Vec::new();
    loop {
        k.push(ALPHABET[i % 64]);
        i /= 64;
        if i == 0 {
            break;
        }
        i -= 1;
    }
    k.reverse();
    String::from_utf8(k).expect("the alphabet is ASCII")
}

/// The top-level repeat groups of a sequence string, as (start, end) byte ranges.
fn groups(s: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < s.len() {
            if s[i] == b'(' {
                let start = i;
                let mut level = 0;
                while i < s.len() {
                    match s[i] {
                        b'(' => level += 1,
                        b')' => {
                            level -= 1;
                            if level == 0 {
                                i += 1;
                                return Some((start, i));
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                return None;
            }
            i += 1;
        }
        None
    })
}

impl Dictionary {
    /// Entries for the groups of `samples` that pay: each use saves the group's length less
    /// the reference's, and the entry costs the group and its key once. At most `max`.
    pub fn choose<'a>(samples: impl Iterator<Item = &'a str>, max: usize) -> Dictionary {
        let mut counts: HashMap<&str, u64> = HashMap::new();
        for s in samples {
            for (a, b) in groups(s.as_bytes()) {
                *counts.entry(&s[a..b]).or_insert(0) += 1;
            }
        }
        let mut scored: Vec<(i64, &str)> = counts
            .into_iter()
            .map(|(g, n)| {
                let key = 2; // a two-character key, "<xx>": 4 characters for each use
                let saving = n as i64 * (g.len() as i64 - key - 2) - (g.len() as i64 + key + 6);
                (saving, g)
            })
            .filter(|(saving, _)| *saving > 0)
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let keys = scored.into_iter().take(max).enumerate().map(|(i, (_, g))| (g.to_string(), key_name(i))).collect();
        Dictionary { keys }
    }

    /// The dictionary's entries, key to text.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.keys.iter().map(|(g, k)| (k.as_str(), g.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// `s` with each top-level group that has an entry replaced by its reference.
    pub fn substitute(&self, s: &str) -> String {
        if self.keys.is_empty() {
            return s.to_string();
        }
        let mut out = String::with_capacity(s.len());
        let mut at = 0;
        for (a, b) in groups(s.as_bytes()) {
            if let Some(k) = self.keys.get(&s[a..b]) {
                out.push_str(&s[at..a]);
                out.push('<');
                out.push_str(k);
                out.push('>');
                at = b;
            }
        }
        out.push_str(&s[at..]);
        out
    }
}

#[cfg(test)]
mod dictionary_tests {
    use super::*;

    /// Chosen entries pay, and substituted strings decode to the same bits.
    #[test]
    fn substitution_pays_and_decodes_alike() {
        let texts: Vec<String> = (0..50).map(|i| format!("AB(40*-)Q(2*(6*a)b)x{}(40*-)(7*Hk)", key_name(i))).collect();
        let d = Dictionary::choose(texts.iter().map(String::as_str), 100);
        assert!(!d.is_empty());
        let dict: HashMap<String, String> = d.entries().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        for t in &texts {
            let s = d.substitute(t);
            assert!(s.len() < t.len(), "{s} is not shorter than {t}");
            assert_eq!(BitReader::new(&s, &dict).expand().unwrap(), BitReader::new(t, &HashMap::new()).expand().unwrap());
        }
        // Keys are distinct and from the key alphabet.
        let keys: std::collections::HashSet<String> = (0..5000).map(key_name).collect();
        assert_eq!(keys.len(), 5000);
        assert!(keys.iter().all(|k| k.bytes().all(|c| sextet(c).is_some())));
    }
}
