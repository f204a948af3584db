//! A fixed-capacity LRU cache (hash map into a slab of doubly linked nodes): O(1) get, insert
//! and eviction, as the correlator's three caches need at millions of events per second.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A fast non-cryptographic hasher (the Fx hash of rustc), word at a time. The correlator's
/// keys come from the agent itself, not from an adversary, so SipHash's protection against
/// hash flooding buys nothing here and costs a third of the throughput.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            // chunks_exact yields exactly 8 bytes.
            self.add(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// `HashMap`/`HashSet` hasher built from `FxHasher`.
pub type FxBuild = BuildHasherDefault<FxHasher>;

const NONE: usize = usize::MAX;

struct Node<K, V> {
    key: K,
    value: V,
    prev: usize,
    next: usize,
}

/// Least-recently-used cache holding at most `capacity` entries.
pub struct Lru<K, V> {
    map: HashMap<K, usize, FxBuild>,
    nodes: Vec<Node<K, V>>,
    head: usize,
    tail: usize,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty cache (capacity at least 1). It grows as entries come: the capacity is a
    /// bound, not a reservation (the correlator's 4096 entries would be 0.5 MB at start).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Lru { map: HashMap::with_hasher(FxBuild::default()), nodes: Vec::new(), head: NONE, tail: NONE, capacity }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.nodes[i].prev, self.nodes[i].next);
        if prev == NONE {
            self.head = next
        } else {
            self.nodes[prev].next = next
        }
        if next == NONE {
            self.tail = prev
        } else {
            self.nodes[next].prev = prev
        }
    }

    fn push_front(&mut self, i: usize) {
        self.nodes[i].prev = NONE;
        self.nodes[i].next = self.head;
        if self.head != NONE {
            self.nodes[self.head].prev = i;
        }
        self.head = i;
        if self.tail == NONE {
            self.tail = i;
        }
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.nodes.iter().map(|n| &n.value)
    }

    /// The value for `key`, marked most recently used.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let i = *self.map.get(key)?;
        self.unlink(i);
        self.push_front(i);
        Some(&mut self.nodes[i].value)
    }

    /// Inserts or replaces, evicting the least recently used entry when full.
    pub fn put(&mut self, key: K, value: V) {
        if let Some(&i) = self.map.get(&key) {
            self.nodes[i].value = value;
            self.unlink(i);
            self.push_front(i);
            return;
        }
        let i = if self.nodes.len() < self.capacity {
            self.nodes.push(Node { key: key.clone(), value, prev: NONE, next: NONE });
            self.nodes.len() - 1
        } else {
            // Reuse the oldest node's slot.
            let i = self.tail;
            self.unlink(i);
            let old = std::mem::replace(&mut self.nodes[i], Node { key: key.clone(), value, prev: NONE, next: NONE });
            self.map.remove(&old.key);
            i
        };
        self.map.insert(key, i);
        self.push_front(i);
    }

    /// The value for `key`, inserting `make()` first when absent.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        if !self.map.contains_key(&key) {
            self.put(key.clone(), make());
        }
        // Present now: either found or just inserted.
        self.get_mut(&key).expect("entry was just ensured")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_at_capacity() {
        let mut c = Lru::new(3);
        c.put(1, "a");
        c.put(2, "b");
        c.put(3, "c");
        assert!(c.get_mut(&1).is_some()); // 1 is now the newest
        c.put(4, "d"); // evicts 2
        assert!(c.get_mut(&2).is_none());
        assert_eq!(c.len(), 3);
        assert_eq!(c.get_mut(&1), Some(&mut "a"));
        c.put(3, "C");
        c.put(5, "e"); // evicts 4
        assert!(c.get_mut(&4).is_none());
        assert_eq!(c.get_mut(&3), Some(&mut "C"));
        assert_eq!(*c.get_or_insert_with(9, || "z"), "z");
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn never_grows_past_capacity_under_churn() {
        let mut c = Lru::new(64);
        for i in 0..10_000u32 {
            c.put(i % 1000, i);
            assert!(c.len() <= 64);
        }
        assert_eq!(c.get_mut(&999), Some(&mut 9999));
    }
}
