//! Turns one YAML or JSON document into a `serde_json::Value` the strict way: a mapping
//! key that appears twice, a number that is not finite (`.nan`, `.inf`) and a document
//! that expands (through YAML aliases) past a size budget are problems with their field
//! path, instead of a silently kept last value, a silent `null` (which a quantity reads
//! as 0) or gigabytes of memory.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::cell::{Cell, RefCell};
use std::fmt;

/// What decoding one document found besides the value.
pub struct Findings {
    /// `<field path>: <problem>` for each duplicate key and non-finite number.
    pub problems: RefCell<Vec<String>>,
    /// Bytes of decoded content still allowed (strings, keys, 8 per node).
    budget: Cell<usize>,
    /// Whether decoding stopped because the budget ran out (not a syntax error).
    pub over_budget: Cell<bool>,
    /// The budget at the start, for the message.
    limit: usize,
}

impl Findings {
    /// Starts with `budget` bytes of decoded content allowed.
    pub fn new(budget: usize) -> Findings {
        Findings {
            problems: RefCell::new(Vec::new()),
            budget: Cell::new(budget),
            over_budget: Cell::new(false),
            limit: budget,
        }
    }

    fn spend<E: serde::de::Error>(&self, path: &str, n: usize) -> Result<(), E> {
        match self.budget.get().checked_sub(n) {
            Some(left) => {
                self.budget.set(left);
                Ok(())
            }
            None => {
                // The problem is recorded here, with our path; the parser's error that
                // stops decoding would carry its own path and position instead.
                self.over_budget.set(true);
                self.problems.borrow_mut().push(format!(
                    "{}: Too long: the document expands to more than {} bytes (YAML aliases repeating content?)",
                    shown(path),
                    self.limit
                ));
                Err(E::custom("document too long"))
            }
        }
    }
}

/// The path as printed: the empty root path reads `(document)`.
fn shown(path: &str) -> &str {
    if path.is_empty() {
        "(document)"
    } else {
        path
    }
}

/// Decodes one value at `path` (empty for the document root).
pub struct Strict<'a> {
    /// Field path of the value, e.g. `spec.containers[0]`.
    pub path: String,
    /// Shared problems and budget.
    pub findings: &'a Findings,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Strict<'_> {
    fn child(&self, path: String) -> Strict<'_> {
        Strict { path, findings: self.findings }
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML or JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.findings.spend(&self.path, 8)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.findings.spend(&self.path, 8)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.findings.spend(&self.path, 8)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Value, E> {
        // Too big for JSON's integers: keep the magnitude as a float (quantities read it).
        self.visit_f64(v as f64)
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Value, E> {
        self.visit_f64(v as f64)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.findings.spend(&self.path, 8)?;
        match Number::from_f64(v) {
            Some(n) => Ok(Value::Number(n)),
            None => {
                // serde_json would turn it into null, which a quantity reads as 0.
                self.findings.problems.borrow_mut().push(format!(
                    "{}: Invalid value: {v}: must be a finite number (.nan and .inf are not allowed)",
                    shown(&self.path)
                ));
                Ok(Value::Null)
            }
        }
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.findings.spend(&self.path, 8 + v.len())?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.findings.spend(&self.path, 8 + v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.findings.spend(&self.path, 8)?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.findings.spend(&self.path, 8)?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.child(format!("{}[{}]", self.path, out.len())))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.findings.spend(&self.path, 8)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.findings.spend(&self.path, key.len())?;
            let path = if self.path.is_empty() { key.clone() } else { format!("{}.{key}", self.path) };
            let value = map.next_value_seed(self.child(path.clone()))?;
            if out.contains_key(&key) {
                // The apiserver's strict decoding reports this; a silently kept last value
                // would run something the author did not mean.
                self.findings
                    .problems
                    .borrow_mut()
                    .push(format!("{path}: Duplicate value: {key:?}: a key may appear only once in a mapping"));
                continue;
            }
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Most YAML events (scalars, aliases, collection starts and ends) one document may have.
/// serde_norway loads all of a document's events before decoding it, about 130 bytes each,
/// so a 10 MiB `[1,1,1,…]` took 665 MB; a pod within the 1.5 MiB object limit has far
/// fewer (an env entry is 6 events).
pub const MAX_YAML_EVENTS_PER_DOCUMENT: usize = 250_000;

/// The deepest nesting of YAML flow collections (`[`, `{`) a manifest may have. Kubernetes'
/// own decoders stop at 10,000 levels or less; a pod needs a handful.
pub const MAX_YAML_FLOW_DEPTH: usize = 1000;

/// Whether `text` nests flow collections (`[`, `{`) more than `max` deep, found by a scan
/// that takes time linear in the text. It runs before libyaml sees the text: libyaml looks
/// at its whole stack of open flow collections at every token, so 50,000 nested `[` (97
/// KB) take it over a minute. Quoted scalars and comments are skipped; a bracket inside a
/// plain scalar may be counted, which only errs towards a deeper count.
pub fn yaml_flow_too_deep(text: &str, max: usize) -> bool {
    let b = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    // Whether a scalar may start here: after a line start, blank or flow indicator.
    let starts =
        |i: usize| i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',' | b':' | b'-');
    while i < b.len() {
        match b[i] {
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'#' if starts(i) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'\'' if starts(i) => {
                i += 1;
                // '' is a quote inside the scalar.
                while i < b.len() && !(b[i] == b'\'' && b.get(i + 1) != Some(&b'\'')) {
                    i += if b[i] == b'\'' { 2 } else { 1 };
                }
            }
            b'"' if starts(i) => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// The 1-based number of the first document of `text` with more than `max` events,
/// counted with libyaml's streaming parser, which holds one event at a time. Syntax
/// errors end the count quietly: the real decode reports them.
pub fn oversized_yaml_document(text: &str, max: usize) -> Option<usize> {
    use std::mem::MaybeUninit;
    use unsafe_libyaml_norway as unsafe_yaml;
    // Boxed: libyaml keeps pointers into the parser, so it must not move once initialised.
    let mut parser: Box<MaybeUninit<unsafe_yaml::yaml_parser_t>> = Box::new(MaybeUninit::uninit());
    let p = parser.as_mut_ptr();
    // SAFETY: `p` points to memory we own that stays in place; the input outlives the parser,
    // which is deleted before returning; each event is deleted after its type is read.
    unsafe {
        if unsafe_yaml::yaml_parser_initialize(p).fail {
            return None;
        }
        unsafe_yaml::yaml_parser_set_input_string(p, text.as_ptr(), text.len() as u64);
        let (mut doc, mut events, mut found) = (0usize, 0usize, None);
        loop {
            let mut event = MaybeUninit::<unsafe_yaml::yaml_event_t>::uninit();
            if unsafe_yaml::yaml_parser_parse(p, event.as_mut_ptr()).fail {
                break;
            }
            let kind = (*event.as_ptr()).type_;
            unsafe_yaml::yaml_event_delete(event.as_mut_ptr());
            match kind {
                unsafe_yaml::YAML_STREAM_END_EVENT => break,
                unsafe_yaml::YAML_DOCUMENT_START_EVENT => {
                    doc += 1;
                    events = 0;
                }
                _ => {
                    events += 1;
                    if events > max {
                        found = Some(doc);
                        break;
                    }
                }
            }
        }
        unsafe_yaml::yaml_parser_delete(p);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str, budget: usize) -> (Result<Value, serde_norway::Error>, Vec<String>) {
        let f = Findings::new(budget);
        let de = serde_norway::Deserializer::from_str(text);
        let v = Strict { path: String::new(), findings: &f }.deserialize(de);
        (v, f.problems.into_inner())
    }

    #[test]
    fn duplicate_keys_and_non_finite_numbers_are_problems_with_paths() {
        let (v, p) = yaml("a:\n  b: 1\n  b: 2\nc: [.nan, -.inf, 1.5]\n", 1 << 20);
        assert_eq!(v.unwrap()["a"]["b"], 1, "the first value is kept");
        assert_eq!(
            p,
            vec![
                "a.b: Duplicate value: \"b\": a key may appear only once in a mapping",
                "c[0]: Invalid value: NaN: must be a finite number (.nan and .inf are not allowed)",
                "c[1]: Invalid value: -inf: must be a finite number (.nan and .inf are not allowed)",
            ]
        );
    }

    #[test]
    fn documents_with_too_many_events_are_found_without_loading_them() {
        let flat = format!("a: 1\n---\nb: [{}1]\n", "1,".repeat(1000));
        assert_eq!(oversized_yaml_document(&flat, 2000), None);
        assert_eq!(oversized_yaml_document(&flat, 500), Some(2));
        assert_eq!(oversized_yaml_document("a: [1, 2\n", 500), None, "syntax errors are left to the decoder");
    }

    #[test]
    fn alias_expansion_stops_at_the_budget() {
        let text = format!("a: &a [{}]\nb: [{}]\n", "x".repeat(1000), vec!["*a"; 50].join(", "));
        let (v, p) = yaml(&text, 10_000);
        assert!(v.is_err());
        assert_eq!(
            p,
            vec!["b[8][0]: Too long: the document expands to more than 10000 bytes (YAML aliases repeating content?)"]
        );
        assert!(yaml(&text, 100_000).0.is_ok());
    }

    #[test]
    fn deep_flow_nesting_is_found_and_quoted_brackets_do_not_count() {
        let deep = "[".repeat(50_000);
        assert!(yaml_flow_too_deep(&deep, MAX_YAML_FLOW_DEPTH));
        let doc = format!("a: {}1{}", "[".repeat(1000), "]".repeat(1000));
        assert!(!yaml_flow_too_deep(&doc, MAX_YAML_FLOW_DEPTH), "1000 levels are allowed");
        assert!(yaml_flow_too_deep(&format!("a: {}1", "{".repeat(1001)), MAX_YAML_FLOW_DEPTH));
        // Brackets in quoted scalars and comments are text; an apostrophe inside a plain
        // scalar opens no quote that could hide brackets after it.
        let quoted = format!("a: '{0}'\nb: \"{0}\\\"{0}\"\n# {0}\nc: it's", "[".repeat(2000));
        assert!(!yaml_flow_too_deep(&quoted, MAX_YAML_FLOW_DEPTH));
        assert!(yaml_flow_too_deep(&format!("c: it's {}", "[".repeat(2000)), MAX_YAML_FLOW_DEPTH));
    }
}
