//! One small Prometheus registry for every manager: counters, histograms with fixed
//! buckets, families of series keyed by label sets, and one renderer of the text exposition
//! format (version 0.0.4). Label values are escaped here, once, so no caller can emit a
//! malformed line. (Not the `prometheus-client` crate: the binary-size budget.)

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Prometheus' default buckets, as kubelet's `DefBuckets`.
pub const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The type of a metric family, as written on its `# TYPE` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative buckets, sum and count.
    Histogram,
    /// Quantiles.
    Summary,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }
}

/// A label value escaped per the text format: backslash, double quote and newline.
pub fn escape_label_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A HELP text escaped per the text format: backslash and newline.
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Writes the text exposition format into a string.
pub struct Encoder<'a> {
    out: &'a mut String,
}

impl<'a> Encoder<'a> {
    /// An encoder appending to `out`.
    pub fn new(out: &'a mut String) -> Self {
        Encoder { out }
    }

    /// The `# HELP` and `# TYPE` lines that start a family.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {}\n# TYPE {name} {}", escape_help(help), kind.name());
    }

    /// One sample line: `name{labels} value` (no braces without labels).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label_value(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// One sample line with a timestamp in milliseconds since the epoch, as kubelet's
    /// resource metrics carry the time each value was read: `name{labels} value 1700000000000`
    /// (none when `timestamp_ms` is `None`).
    pub fn sample_at(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display, timestamp_ms: Option<i64>) {
        match timestamp_ms {
            None => self.sample(name, labels, value),
            Some(ms) => self.sample(name, labels, format_args!("{value} {ms}")),
        }
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The `_bucket`, `_sum` and `_count` lines of one histogram series.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let les: Vec<String> = DEFAULT_BUCKETS.iter().map(|b| b.to_string()).collect();
        let mut with_le: Vec<(&str, &str)> = labels.to_vec();
        let bucket = format!("{name}_bucket");
        for (le, c) in les.iter().zip(h.counts) {
            with_le.push(("le", le));
            self.sample(&bucket, &with_le, c);
            with_le.pop();
        }
        with_le.push(("le", "+Inf"));
        self.sample(&bucket, &with_le, h.count);
        self.sample(&format!("{name}_sum"), labels, h.sum);
        self.sample(&format!("{name}_count"), labels, h.count);
    }
}

/// A float written as Prometheus' Go text encoder writes it (`strconv.FormatFloat(v, 'g',
/// -1, 64)`): the shortest digits that read back as the same value, in exponent form when
/// the exponent is below -4 or 6 and above (`1.4667776e+07`, `0.0001`, `123456.5`), and
/// `0`, `NaN`, `+Inf`, `-Inf`. Scrapers parse either form; this keeps ferrolet's pages byte for
/// byte like kubelet's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GoFloat(pub f64);

impl Display for GoFloat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.0;
        if v.is_nan() {
            return f.write_str("NaN");
        }
        if v.is_infinite() {
            return f.write_str(if v > 0.0 { "+Inf" } else { "-Inf" });
        }
        if v == 0.0 {
            // The encoder writes -0 as 0 too.
            return f.write_str("0");
        }
        // Rust's `{:e}` gives the same shortest round-trip digits as Go: `d.ddde±x`.
        let sci = format!("{:e}", v.abs());
        let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        if v < 0.0 {
            f.write_str("-")?;
        }
        if !(-4..6).contains(&exp) {
            let (first, rest) = digits.split_at(1);
            let sign = if exp < 0 { '-' } else { '+' };
            let point = if rest.is_empty() { "" } else { "." };
            return write!(f, "{first}{point}{rest}e{sign}{:02}", exp.abs());
        }
        // The decimal point sits after `exp + 1` digits.
        let point = exp + 1;
        if point <= 0 {
            write!(f, "0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else if point as usize >= digits.len() {
            write!(f, "{digits}{}", "0".repeat(point as usize - digits.len()))
        } else {
            let (int, frac) = digits.split_at(point as usize);
            write!(f, "{int}.{frac}")
        }
    }
}

/// A counter of its own (one series, no labels).
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Observations counted into `DEFAULT_BUCKETS` (cumulative, as the format wants them).
#[derive(Default, Debug, Clone, PartialEq)]
pub struct Histogram {
    counts: [u64; DEFAULT_BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    /// Counts one observation.
    pub fn observe(&mut self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, b) in DEFAULT_BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// A histogram updated without a lock (by one hot path), read as a `Histogram`.
#[derive(Default, Debug)]
pub struct AtomicHistogram {
    counts: [AtomicU64; DEFAULT_BUCKETS.len()],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl AtomicHistogram {
    /// Counts one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, b) in DEFAULT_BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_nanos.fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The observations so far (each field read on its own: a render racing an update may
    /// be one observation behind in some of them, as with any scrape).
    pub fn snapshot(&self) -> Histogram {
        Histogram {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

/// The label values of one series, in the order of its family's label names.
pub trait LabelSet: Ord {
    /// The values (escaped by the renderer, not here).
    fn values(&self) -> Vec<&str>;
}

impl LabelSet for String {
    fn values(&self) -> Vec<&str> {
        vec![self]
    }
}

impl LabelSet for (String, String) {
    fn values(&self) -> Vec<&str> {
        vec![&self.0, &self.1]
    }
}

/// What a family's series hold: a count or a histogram.
pub trait Value: Default {
    /// The family's type.
    const KIND: Kind;
    /// Writes the series' sample lines.
    fn encode(&self, enc: &mut Encoder, name: &str, labels: &[(&str, &str)]);
}

impl Value for u64 {
    const KIND: Kind = Kind::Counter;
    fn encode(&self, enc: &mut Encoder, name: &str, labels: &[(&str, &str)]) {
        enc.sample(name, labels, self);
    }
}

impl Value for Histogram {
    const KIND: Kind = Kind::Histogram;
    fn encode(&self, enc: &mut Encoder, name: &str, labels: &[(&str, &str)]) {
        enc.histogram(name, labels, self);
    }
}

/// A metric family: one series per label set, in label order.
pub struct Family<K, V> {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    series: Mutex<BTreeMap<K, V>>,
}

/// Counters by label set.
pub type CounterVec<K> = Family<K, u64>;
/// Histograms by label set.
pub type HistogramVec<K> = Family<K, Histogram>;

impl<K: LabelSet, V: Value> Family<K, V> {
    /// An empty family; `labels` names the values each `K` gives.
    pub fn new(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Self {
        Family { name, help, labels, series: Mutex::new(BTreeMap::new()) }
    }

    /// Changes the series of `key` (created at zero), or, if it is new and the family
    /// already has `max` series, leaves everything as it is and returns false.
    pub fn update_bounded(&self, key: K, max: usize, f: impl FnOnce(&mut V)) -> bool {
        let mut all = self.series.lock();
        if let Some(v) = all.get_mut(&key) {
            f(v);
        } else if all.len() < max {
            f(all.entry(key).or_default());
        } else {
            return false;
        }
        true
    }

    /// Changes the series of `key`, created at zero.
    pub fn update(&self, key: K, f: impl FnOnce(&mut V)) {
        self.update_bounded(key, usize::MAX, f);
    }

    /// Keeps only the series for which `keep` is true.
    pub fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.series.lock().retain(|k, _| keep(k));
    }

    /// Reads the series of `key`, if it exists.
    pub fn with<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        self.series.lock().get(key).map(f)
    }

    /// Writes the family: HELP, TYPE, then every series.
    pub fn encode(&self, enc: &mut Encoder) {
        enc.family(self.name, V::KIND, self.help);
        for (k, v) in self.series.lock().iter() {
            let values = k.values();
            debug_assert_eq!(values.len(), self.labels.len(), "{}: label values", self.name);
            let labels: Vec<(&str, &str)> = self.labels.iter().copied().zip(values).collect();
            v.encode(enc, self.name, &labels);
        }
    }
}

impl<K: LabelSet> CounterVec<K> {
    /// Adds one to the series of `key`.
    pub fn inc(&self, key: K) {
        self.update(key, |n| *n += 1);
    }

    /// The value of `key`'s series (0 if it has none).
    pub fn get(&self, key: &K) -> u64 {
        self.with(key, |n| *n).unwrap_or(0)
    }
}

impl<K: LabelSet> HistogramVec<K> {
    /// Counts one observation in the series of `key`.
    pub fn observe(&self, key: K, d: Duration) {
        self.update(key, |h| h.observe(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(f: impl FnOnce(&mut Encoder)) -> String {
        let mut out = String::new();
        f(&mut Encoder::new(&mut out));
        out
    }

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        assert_eq!(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        let text = render(|e| e.sample("m", &[("pod", "we\"b\n")], 1));
        assert_eq!(text, "m{pod=\"we\\\"b\\n\"} 1\n");
    }

    #[test]
    fn help_escapes_backslash_and_newline_but_keeps_quotes() {
        let text = render(|e| e.family("m", Kind::Counter, "a \"b\"\\\nc"));
        assert_eq!(text, "# HELP m a \"b\"\\\\\\nc\n# TYPE m counter\n");
    }

    #[test]
    fn floats_are_written_as_gos_text_encoder_writes_them() {
        let cases: [(f64, &str); 16] = [
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (9.062226, "9.062226"),
            (14_667_776.0, "1.4667776e+07"),
            (1_000_000.0, "1e+06"),
            (999_999.0, "999999"),
            (123_456.5, "123456.5"),
            (100_000.0, "100000"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (1.7e9, "1.7e+09"),
            (1_698_143_234.5, "1.6981432345e+09"),
            (2.5e-300, "2.5e-300"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ];
        for (v, want) in cases {
            assert_eq!(GoFloat(v).to_string(), want, "{v:?}");
        }
        assert_eq!(GoFloat(f64::NAN).to_string(), "NaN");
        assert_eq!(GoFloat(-0.5).to_string(), "-0.5");
        // Whatever the form, it reads back as the same value.
        for v in [1e21, 123_456_789.123, 3.0e-7, 42.000_001] {
            assert_eq!(GoFloat(v).to_string().parse::<f64>().unwrap(), v);
        }
    }

    #[test]
    fn a_sample_may_carry_a_timestamp_in_milliseconds() {
        let text = render(|e| {
            e.sample_at("m", &[("pod", "p")], GoFloat(0.5), Some(1_700_000_000_123));
            e.sample_at("n", &[], 1, None);
        });
        assert_eq!(text, "m{pod=\"p\"} 0.5 1700000000123\nn 1\n");
    }

    #[test]
    fn a_sample_without_labels_has_no_braces() {
        assert_eq!(render(|e| e.single("up", Kind::Gauge, "Up.", 1)), "# HELP up Up.\n# TYPE up gauge\nup 1\n");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf() {
        let mut h = Histogram::default();
        h.observe(Duration::from_millis(20));
        h.observe(Duration::from_secs(20));
        let text = render(|e| e.histogram("d", &[("r", "x")], &h));
        assert!(
            text.starts_with(
                "d_bucket{r=\"x\",le=\"0.005\"} 0\nd_bucket{r=\"x\",le=\"0.01\"} 0\nd_bucket{r=\"x\",le=\"0.025\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains("d_bucket{r=\"x\",le=\"1\"} 1\n"), "{text}");
        assert!(text.contains("d_bucket{r=\"x\",le=\"10\"} 1\nd_bucket{r=\"x\",le=\"+Inf\"} 2\n"), "{text}");
        assert!(text.ends_with("d_sum{r=\"x\"} 20.02\nd_count{r=\"x\"} 2\n"), "{text}");
    }

    #[test]
    fn a_family_renders_its_series_in_label_order_with_escaped_values() {
        let f: CounterVec<(String, String)> = Family::new("ev_total", "Events.", &["type", "reason"]);
        f.inc(("Warning".into(), "Back\"Off".into()));
        f.inc(("Normal".into(), "Started".into()));
        f.inc(("Normal".into(), "Started".into()));
        assert_eq!(f.get(&("Normal".into(), "Started".into())), 2);
        let text = render(|e| f.encode(e));
        assert_eq!(
            text,
            "# HELP ev_total Events.\n# TYPE ev_total counter\n\
             ev_total{type=\"Normal\",reason=\"Started\"} 2\n\
             ev_total{type=\"Warning\",reason=\"Back\\\"Off\"} 1\n"
        );
    }

    #[test]
    fn a_bounded_family_counts_known_series_but_adds_no_new_one_past_its_limit() {
        let f: CounterVec<String> = Family::new("r_total", "R.", &["resource_name"]);
        assert!(f.update_bounded("a".into(), 1, |n| *n += 1));
        assert!(!f.update_bounded("b".into(), 1, |n| *n += 1));
        assert!(f.update_bounded("a".into(), 1, |n| *n += 1));
        assert_eq!((f.get(&"a".into()), f.get(&"b".into())), (2, 0));
    }

    #[test]
    fn an_empty_family_still_has_help_and_type() {
        let f: HistogramVec<String> = Family::new("h_seconds", "H.", &["x"]);
        assert_eq!(render(|e| f.encode(e)), "# HELP h_seconds H.\n# TYPE h_seconds histogram\n");
        f.observe("a".into(), Duration::from_millis(1));
        f.retain(|k| k != "a");
        assert_eq!(f.with(&"a".into(), |h| h.count()), None);
    }
}
